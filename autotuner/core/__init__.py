"""The loop: the study driver, the trial executor, the typed trial record and the pure rules they use
(objective, winner, pruning, stopping, sampling, load search)."""
