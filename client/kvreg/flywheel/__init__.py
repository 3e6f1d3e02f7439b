"""The flywheel: a small trained model, its arithmetic task and its exam (DESIGN §8)."""
