"""crashlab: every crash state a power cut could leave, built from a recorded workload and checked.

The method is ALICE's (Pillai et al., "All File Systems Are Not Created Equal", OSDI 2014):
record what an application asks of the file system, build the on-disk states a crash could
leave under a file system's persistence rules, and run the application's recovery on each.
The pieces, in the order they run:

- ``strace`` — the recorder: the workload runs under ``strace -f`` (why system calls, and
  why strace, is in its docstring);
- ``trace`` — system calls to logical operations on the watched folders (``ops``), against a
  live copy of the folders' pre-workload snapshot (``fstree``); the whole trace replayed must
  equal what the workload left on disk, or the recording is refused;
- ``persistence`` — the persistence models (``alice``: ALICE's weak default; ``ext4-ordered``):
  operations split into units a crash keeps or loses, what each ``fsync`` makes durable, and
  what the model orders;
- ``replay`` — a crash state: the snapshot plus a chosen set of units;
- ``explore`` — which states to check within a budget, and checking them;
- ``checks`` — the invariants, with kvreg's own tools (``kvreg fsck``, ``show``, ``verify``;
  the registry's app start, ``kvreg-admin fsck``, ``PRAGMA integrity_check``, pulls over the API,
  the audit log against acknowledged checkpoints);
- ``workloads`` and ``driver`` — kvreg's workloads and the process strace records;
- ``faults`` — deliberately broken builds, to show the explorer fails when it should.

``bench/crash_states.py`` runs it all and reports; ``tests/crash/test_crash_states.py`` runs its
quick form and the broken builds; ``tests/crash/test_power_loss.py`` explores small programs.
This package is test and benchmark tooling: kvreg never imports it.
"""
