"""Who a request speaks for: the identity providers (the operator token, an OpenID Connect
issuer, a JupyterHub), the chooser that asks them in turn, the dashboard's browser
sessions and the CLI's login through the issuer."""
