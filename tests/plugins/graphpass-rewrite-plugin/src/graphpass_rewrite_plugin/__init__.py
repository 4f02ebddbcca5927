"""An example graphpass plugin: onnxscript pattern rewrites as graphpass passes."""
