"""The numbers the views and their commands show: derivations (explain), per-token strips, the
display prefix tree, the run explorer, whose credit moved a token (attribution)."""
