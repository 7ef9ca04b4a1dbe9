"""Celery workers that run assay shards."""
