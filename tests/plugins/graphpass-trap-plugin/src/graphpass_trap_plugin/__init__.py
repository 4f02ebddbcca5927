"""Test fixture: plugins with the mistakes a new plugin author makes, each on its own."""
