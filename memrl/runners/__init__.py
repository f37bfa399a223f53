"""EnvRunners and ConnectorV2 pieces (multi-turn text runner, Memo cache refresh)."""
