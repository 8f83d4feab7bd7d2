"""The real servers tests and benchmarks start: Redis (alone, Sentinel, Cluster), a MongoDB
wire-protocol server, the zaqar-delay server under gunicorn, a Swift all-in-one, a Keystone v3
stand-in, a push receiver, and network namespaces for partitions."""
