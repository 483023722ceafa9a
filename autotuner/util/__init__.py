"""The ground floor every module may use: atomic files, paths, locks, secrets, interrupts, extras, logs,
a child that dies with its parent."""
