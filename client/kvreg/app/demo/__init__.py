"""``kvreg demo``'s use case: the whole story on embedded defaults, offline.

:mod:`.scenario` runs it (:func:`~kvreg.app.demo.scenario.run_demo` returns a
:class:`~kvreg.app.demo.scenario.DemoReport`); :mod:`.texts` holds the demo's
fixed texts and settings, :mod:`.rows` the report rows, :mod:`.server` the
embedded registry (bootstrap and ``kvreg serve`` as a subprocess),
:mod:`.registry_act` the push/pull act and :mod:`.flywheel_act` the flywheel act.
This is the only client package that imports ``kvreg_registry``. Nothing here
renders or prints.
"""
