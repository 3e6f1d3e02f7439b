"""The flywheel's use cases: exam the frozen model, build a verified library, exam again through ``ask``.

:mod:`.loop` runs the three phases (baseline, library, exam again),
:mod:`.library` verifies and deposits the library, :mod:`.run` is ``kvreg
flywheel`` in a store (pushing to a remote when asked), :mod:`.session` loads the
model and runs it, and :mod:`.preflight` holds the checks made before the engine
is loaded. The model, its task and its exams are
in ``kvreg.engine.flywheel``. Nothing here renders or prints.

The GSM8K task, pure Python: :mod:`.gsm8k` loads the problems shipped in
``data/gsm8k/`` (MIT, OpenAI) and builds chat prompts; :mod:`.gsm8k_checker` is the
strict checker (the final answer, and every arithmetic claim on the way), which reads
numbers with :mod:`.gsm8k_numbers` and claims with :mod:`.gsm8k_arith`.
"""
