"""Assaygate: typed failure injection as the evidence that decides release."""
