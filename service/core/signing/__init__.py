"""What is signed: fault dossiers (in-toto in DSSE, Ed25519) and scoped injector credentials.
Above `decision`; independent of `shards`."""
