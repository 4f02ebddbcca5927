"""An example plugin giving the gradient builder of ``example.graphpass::ScaledTanh``."""
