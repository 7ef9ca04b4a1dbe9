"""What trials add up to: tallies, the report's figures, counterfactual pairs, the interval and
anytime-valid bounds, the sequential stopping rule and what an assay spends. Above `trial`."""
