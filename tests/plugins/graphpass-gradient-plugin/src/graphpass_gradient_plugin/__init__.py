"""An example plugin giving the gradient builders of two ``example.graphpass`` operators."""
