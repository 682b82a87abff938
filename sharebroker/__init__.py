"""sharebroker: a Kafka-compatible development broker with share groups (KIP-932).

The installed distribution claims this one import namespace. The repository keeps its rooms at the
top level (broker/, protocol/, storage/, config/, pipeline/); here they are linked in as
subpackages, so code imports `sharebroker.broker...`, never a bare `config` or `storage` that
would collide with an application's own packages."""
