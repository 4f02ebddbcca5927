"""An example graphpass plugin (the worked example of docs/plugins.md)."""
