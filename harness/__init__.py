"""tokxfer: a benchmark harness for embedding initialization under vocabulary transfer."""
