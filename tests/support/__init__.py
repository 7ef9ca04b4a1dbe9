"""Helpers for the service tests: real PostgreSQL databases, Redis, worker and API processes."""
