"""TLS, tokens and roles, and attacks on them."""
