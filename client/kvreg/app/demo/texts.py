"""The demo's fixed inputs: its question, solution and other texts, its model and registry settings.

Constants only; no logic. Tests use :data:`QUESTION` and :data:`SOLUTION` as a
realistic text.
"""

from __future__ import annotations

ARCH = "llama"
SEED = 0
BLOCK_SIZE = 16
DECODE_STEPS = 32
TIMING_REPEATS = 3

QUESTION = (
    "Problem 7. Find the number of ordered pairs of positive integers (a, b) such that a + b = 1000 "
    "and neither a nor b has a zero digit."
)
SOLUTION = (
    " Solution: count the numbers from 1 to 999 without a zero digit, then subtract the pairs whose "
    "partner contains a zero. Step 1: one-digit numbers contribute 9. Step 2: two-digit numbers without "
    "zero contribute 81. Step 3: three-digit numbers contribute 729. The answer is 738."
)
EXTENSION = (
    " Check: an exhaustive checker enumerated every pair (a, 1000 - a) and counted 738 pairs with no zero "
    "digit. Verified by an exhaustive checker: pass."
)
FOLLOW_UP = " Now the same question for a + b = 2000: Step 1:"
ANSWER = "738"

# The registry act.
NAMESPACE = "demo"
FLYWHEEL_NAMESPACE = "flywheel"
REMOTE = "demo-registry"
ADMIN_USER = "admin"
READER_USER = "reader"
SERVER_START_TIMEOUT = 60.0
SERVER_STOP_TIMEOUT = 10.0
TRANSFER_JOBS = 4
