"""The settings: their models and rules, value formats, how violations read, and loading
them from files, the environment or Helm values."""
