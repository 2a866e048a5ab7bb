"""Facts read by sources.  One module per area; :mod:`gpuclinic.facts.snapshot` ties them together."""
