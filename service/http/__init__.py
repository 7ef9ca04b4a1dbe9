"""What the two HTTP edges (the API and the dashboard) share: request dependencies, the route →
roles table, the browser session cookie, the request-text check, the broker and limit adapters,
and the HTTP-level errors. Neither edge imports the other; both import this."""
