"""tfx-bridge TFX components."""
