//! Every Python class the core reads or writes, and the attributes it touches on each: one table.
//!
//! The core is exported this table as `TOUCHES` and `kappaflow.tasks.native` compares it at import with
//! its own copy, as it compares `PROTOCOL`: a Python refactor that renames or drops one of these fails
//! there (and in tests/runtime/test_native_core.py), not per record. The classes are slotted, so a
//! field is a member descriptor the core reads without a dict lookup (`slots.rs`). Every attribute name
//! the Rust sources use is in this table: the same test scans them.

/// `(module.Class, attributes)`, one row a class; the order of a slotted record's fields is the order
/// the core builds its instances in (`SlotClass`).
pub const TOUCHES: &[(&str, &[&str])] = &[
    (
        "kappaflow.tasks.drain.DrainPlan",
        &[
            "topic",
            "partition",
            "key_utf8",
            "value_utf8",
            "key_deserializer",
            "value_deserializer",
            "custom_extractor",
            "extract_timestamp",
            "deserialization_failed",
            "registry_unavailable",
            "processing_failed",
            "passed_through",
            "context",
            "record_context",
            "node",
            "call",
            "record_type",
            "schedules",
            "punctuate",
        ],
    ),
    (
        "kappaflow.tasks.native.StatelessPlan",
        &[
            "kind",
            "callback",
            "flag",
            "node",
            "context",
            "downstream",
            "pair",
        ],
    ),
    (
        "kappaflow.tasks.native.SinkPlan",
        &[
            "topic",
            "node",
            "send",
            "key_utf8",
            "value_utf8",
            "key_serializer",
            "value_serializer",
            "context",
            "serialization_error",
            "streams_error",
        ],
    ),
    (
        "kappaflow.tasks.native.AggregatePlan",
        &[
            "node",
            "context",
            "skip_null",
            "counting",
            "initializer",
            "aggregator",
            "reducer",
            "store",
            "value_and_timestamp",
            "record_context",
        ],
    ),
    (
        "kappaflow.tasks.context.ProcessorContextImpl",
        &["current", "current_node", "failed_node", "stream_time"],
    ),
    ("kappaflow.state.api.RecordContext", RECORD_CONTEXT_FIELDS),
    (
        "kappaflow.state.timestamped.ValueAndTimestamp",
        VALUE_AND_TIMESTAMP_FIELDS,
    ),
    (
        "kappaflow.state.kv_layers.CachedStoreBinding",
        &[
            "context",
            "cache",
            "namespace",
            "topic",
            "utf8_keys",
            "serialize_key",
            "deserialize",
            "inner_get",
            "serialize",
            "decodes_to_itself",
            "packs_longs",
            "caching_put",
        ],
    ),
    (
        "kappaflow.state.flushed_batch.FlushedBatch",
        &[
            "writes",
            "olds",
            "decodeds",
            "topic",
            "utf8_keys",
            "deserialize_key",
            "deserialize_value",
            "set_record_context",
            "not_decoded",
        ],
    ),
    (
        "kappaflow.dsl.table_processors.TableFlushPlan",
        &[
            "context",
            "node",
            "child",
            "child_name",
            "stamp",
            "send_old",
            "change",
        ],
    ),
    (
        "kappaflow.dsl.change.Change",
        &["new_value", "old_value", "is_latest"],
    ),
];

/// The fields of `kappaflow.state.api.RecordContext`, in the order the drain loop sets them.
pub const RECORD_CONTEXT_FIELDS: &[&str] =
    &["timestamp", "topic", "partition", "offset", "headers"];
/// The fields of `kappaflow.state.timestamped.ValueAndTimestamp`.
pub const VALUE_AND_TIMESTAMP_FIELDS: &[&str] = &["value", "timestamp"];
