"""Fleet view: many gpuclinic agents at once, through Prometheus or the agents' own JSON APIs."""
