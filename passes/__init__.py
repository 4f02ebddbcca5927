"""Built-in graphpass passes."""
