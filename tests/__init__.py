"""tokxfer's tests, one folder per room (docs/ARCHITECTURE.md)."""
