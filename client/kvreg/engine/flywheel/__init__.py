"""The flywheel's model side (DESIGN §8): the bundled small trained model, its arithmetic task,
its tokenizer, greedy exams and seeded sampling, and its training script.

The loop that builds a verified library and exams the model again is a use case
(``kvreg.app.flywheel``); this package does not deposit, push or route.
"""
