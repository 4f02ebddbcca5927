"""Test fixture: plugins that misbehave in every way graphpass must survive."""
