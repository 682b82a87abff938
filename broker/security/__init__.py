"""Authentication (TLS, SASL) and authorization (ACLs). A connection carries the principal it
authenticated as; every API that Kafka authorizes asks the broker's authorizer about it."""
