"""``omp``: orthogonal matching pursuit over overlap anchors (tokensurgeon; Goddard & Fernandes Neto 2025).

The batched, chunked core is checked against a one-token-at-a-time numpy re-derivation (greedy
choice, least squares on the atoms picked so far), against exact recovery of sparse combinations,
and the method on the tiny world against the same re-derivation from the helper model's embeddings.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness import registry, seeding
from harness import vocab as _canon
from harness.model import surgery
from harness.protocols import COMBINED, COPIED, FALLBACK
from methods.omp import OmpConfig, omp_select


def brute_omp(x: np.ndarray, D: np.ndarray, k: int, selection: str = "inner-product") -> tuple[list[int], np.ndarray]:
    """Textbook OMP for one vector, in float64: pick argmax |<r, d_j>| (/||d_j||), refit by least squares."""
    picked: list[int] = []
    coef = np.zeros(0)
    r = x.copy()
    for _ in range(min(k, len(D))):
        score = np.abs(D @ r)
        if selection == "normalized":
            score = score / np.linalg.norm(D, axis=1)
        score[picked] = -1
        j = int(np.argmax(score))
        if score[j] <= 0:
            break
        picked.append(j)
        coef = np.linalg.lstsq(D[picked].T, x, rcond=None)[0]
        r = x - coef @ D[picked]
        if np.linalg.norm(r) <= 1e-6 * np.linalg.norm(x):
            break
    return picked, coef


@pytest.mark.parametrize("selection", ["inner-product", "normalized"])
def test_batched_omp_equals_one_token_at_a_time(selection):
    g = np.random.default_rng(0)
    D = g.normal(size=(30, 12)) * g.uniform(0.2, 3.0, size=(30, 1))  # atoms of very different norms
    X = g.normal(size=(50, 12))
    idx, coef, used = omp_select(X, D, 5, selection=selection, chunk_rows=7)  # chunks of 7 targets
    for i in range(len(X)):
        want_idx, want_coef = brute_omp(X[i], D, 5, selection)
        assert idx[i, : used[i]].tolist() == want_idx
        np.testing.assert_allclose(coef[i, : used[i]], want_coef, rtol=1e-8, atol=1e-10)
        assert np.all(idx[i, used[i] :] == -1) and np.all(coef[i, used[i] :] == 0)
    # the two rules differ somewhere on a dictionary with unequal norms
    other = omp_select(X, D, 5, selection="normalized" if selection == "inner-product" else "inner-product")[0]
    assert not np.array_equal(other, idx)


def test_sparse_combinations_are_recovered_exactly_and_stop_early():
    g = np.random.default_rng(1)
    D = np.linalg.qr(g.normal(size=(60, 40)))[0].T  # incoherent (orthonormal) atoms: recovery is guaranteed
    D = D * g.uniform(0.5, 2.0, size=(40, 1))  # of unequal norms
    support = [g.choice(40, size=3, replace=False) for _ in range(20)]
    weights = [g.uniform(1.0, 2.0, size=3) * g.choice([-1, 1], size=3) for _ in range(20)]
    X = np.stack([w @ D[s] for s, w in zip(support, weights)])
    idx, coef, used = omp_select(X, D, 8, selection="normalized")
    assert np.all(used == 3)  # the residual vanished after 3 atoms: no 5 useless extra terms
    for i in range(20):
        got = dict(zip(idx[i, :3].tolist(), coef[i, :3]))
        assert set(got) == set(support[i].tolist())
        np.testing.assert_allclose([got[j] for j in support[i]], weights[i], rtol=1e-9)


def test_fewer_atoms_than_k_and_degenerate_inputs():
    D = np.array([[1.0, 0.0], [0.0, 0.0]])  # a zero atom is never picked
    idx, coef, used = omp_select(np.array([[3.0, 4.0], [0.0, 0.0]]), D, 5)
    assert idx[0].tolist() == [0, -1] and used.tolist() == [1, 0]
    np.testing.assert_allclose(coef[0], [3.0, 0.0])
    with pytest.raises(ValueError, match="at least one atom"):
        omp_select(np.ones((1, 2)), np.zeros((0, 2)), 3)


# ------------------------------------------------------------------------- the method on the tiny world


@pytest.fixture(scope="module")
def transfer(near_transfer):
    return near_transfer


def _run(inputs, **cfg):
    return registry.get("method", "omp").make(cfg).initialize(inputs, seeding.numpy_rng(1, "init", "omp"))


@pytest.mark.parametrize("selection", ["inner-product", "normalized"])
def test_helper_donor_rows_are_the_brute_force_omp_of_the_helper_embeddings(transfer, selection):
    inputs, H = transfer["inputs"], transfer["helper"]
    res = _run(inputs, donor="helper", k=4, selection=selection)
    m = res.mapping
    ov = _canon.compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, fuzzy=False)
    anchors = ov.exact  # every overlap token is in the helper's (= the target's) vocabulary
    specials = _canon.special_ids(inputs.target_tokenizer)
    new = [t for t in range(m.n_target) if t not in set(anchors[:, 0].tolist()) and t not in specials]
    assert len(new) > 100 and all(m.provenance[t] == COMBINED for t in new)
    for t, s in anchors:
        assert m.provenance[t] == COPIED and m.row(int(t))[0].tolist() == [int(s)]
    for t in new:
        picked, coef = brute_omp(H[t], H[anchors[:, 0]], 4, selection)
        want = {int(anchors[j, 1]): c for j, c in zip(picked, coef)}
        ids, ws = m.row(t)
        assert dict(zip(ids.tolist(), ws.tolist())).keys() == want.keys()
        np.testing.assert_allclose([dict(zip(ids.tolist(), ws))[s] for s in want], list(want.values()), rtol=1e-4,
                                   atol=1e-6)
    assert res.info["omp"]["anchors"] == len(anchors) and res.info["donor"]["kind"] == "helper"
    assert 0 <= res.info["omp"]["relative_residual_median"] < 1
    # installed rows are the coefficients applied to the source rows (not normalized, may be negative)
    E = inputs.source_embeddings
    W = surgery.materialize(m, E, seeding.torch_generator(1, "x"))
    t = new[0]
    ids, ws = m.row(t)
    torch.testing.assert_close(W[t].double(), torch.as_tensor(ws, dtype=torch.float64) @ E[ids].double(),
                               rtol=1e-5, atol=1e-6)
    assert np.any(m.weights < 0)


def test_fasttext_donor_is_focus_aux_fasttext_and_rare_tokens_are_random_with_a_reason(transfer):
    from methods.focus import Focus

    inputs = transfer["inputs"]
    fast = {"aux_dim": 16, "aux_epochs": 1, "aux_bucket": 540_672, "aux_seed": 3}
    res = _run(inputs, aux_min_count=30, **fast)
    vecs, has, _ = Focus(OmpConfig(aux_min_count=30, **fast).focus_config())._aux_vectors(
        inputs, len(inputs.target_tokenizer), 3)
    m = res.mapping
    fb = set(m.fallback_ids().tolist()) - _canon.special_ids(inputs.target_tokenizer)
    comb = set(np.flatnonzero(m.provenance == COMBINED).tolist())
    assert fb and comb
    assert all(not has[t] for t in fb) and all(has[t] for t in comb)  # FOCUS's vectors decide
    [(why, ids)] = res.random_reasons.items()
    assert "aux_min_count=30" in why and set(ids) == fb
    assert res.info["donor"]["kind"] == "fasttext"


def test_errors_name_the_missing_input_and_bad_fields(transfer):
    import dataclasses

    inputs = dataclasses.replace(transfer["inputs"], helper_model=None)
    with pytest.raises(ValueError, match="inputs.helper_model"):
        _run(inputs, donor="helper")
    with pytest.raises(ValueError, match="inputs.target_corpus"):
        _run(dataclasses.replace(inputs, target_corpus=None))
    with pytest.raises(ValueError, match="OmpConfig.k"):
        OmpConfig(k=0)
    with pytest.raises(ValueError, match="aux_bucket"):
        OmpConfig(aux_dim=300, aux_bucket=10)
    with pytest.raises(ValueError, match="OmpConfig.donor"):
        OmpConfig(donor="model")


def test_new_tokens_outside_the_helpers_vocabulary_are_random_with_a_reason(transfer):
    """A helper in the *source* vocabulary (the source model itself) knows the anchors but no new token."""
    import dataclasses

    inputs = dataclasses.replace(transfer["inputs"], helper_model=transfer["model_dir"])
    res = _run(inputs, donor="helper")
    m = res.mapping
    assert np.sum(m.provenance == COMBINED) == 0
    fb = set(m.fallback_ids().tolist()) - _canon.special_ids(inputs.target_tokenizer)
    assert {t for ids in res.random_reasons.values() for t in ids} == fb
    assert any("helper model's vocabulary" in why for why in res.random_reasons)
    assert all(m.provenance[t] == FALLBACK for t in fb)


def test_least_squares_of_a_singular_gram_is_the_minimum_norm_solution():
    from methods.omp import _least_squares

    g = np.random.default_rng(3)
    A = g.normal(size=(5, 3, 7))
    A[1, 2] = A[1, 0]  # row 1: two identical atoms, a singular Gram matrix
    x = g.normal(size=(5, 7))
    got = _least_squares(torch.as_tensor(A), torch.as_tensor(x)).numpy()
    for _ in range(20):  # the same answer every time (LAPACK's gelsy was not, on this matrix)
        assert np.array_equal(_least_squares(torch.as_tensor(A), torch.as_tensor(x)).numpy(), got)
    for i in range(5):
        want = np.linalg.lstsq(A[i].T, x[i], rcond=None)[0]
        np.testing.assert_allclose(got[i], want, rtol=1e-6, atol=1e-9)
