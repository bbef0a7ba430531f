// shard_log.cpp: placeholder until the JetStream shard log lands.
