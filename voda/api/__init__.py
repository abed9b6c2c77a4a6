"""The REST service: app factory, routes, schemas, auth, metrics and the scheduling loop."""
