import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import java.time.Duration;
import java.time.Instant;
import java.util.Map;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.StateStore;
import org.apache.kafka.streams.query.MultiVersionedKeyQuery;
import org.apache.kafka.streams.query.PositionBound;
import org.apache.kafka.streams.query.QueryConfig;
import org.apache.kafka.streams.query.QueryResult;
import org.apache.kafka.streams.query.VersionedKeyQuery;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.VersionedRecord;
import org.apache.kafka.streams.state.VersionedRecordIterator;

/**
 * The "vq_" topology family and the versioned key queries (KIP-960, KIP-968) a scenario asks after its
 * steps, run through the store's IQv2 `query` as Kafka Streams answers them; tests/conformance/topologies_vq.py
 * is the Python half. A query is [store, key, asOf|null] (VersionedKeyQuery) or [store, key, from|null,
 * to|null, "asc"|"desc"|"any"] (MultiVersionedKeyQuery); a version is written [value, timestamp,
 * validTo|null], a missing one null.
 */
final class VersionedQueries {
    private VersionedQueries() {}

    private static final ObjectMapper JSON = new ObjectMapper();

    static Topologies.Spec build(String family, JsonNode p) {
        if (!family.equals("vq_table")) {
            return null;
        }
        StreamsBuilder b = new StreamsBuilder();
        b.<String, String>table("in", Materialized.as(Stores.persistentVersionedKeyValueStore(
                "prices", Duration.ofMillis(p.get("history").asLong())))).toStream().to("out");
        return new Topologies.Spec(b.build(), Map.of("out", "string"));
    }

    private static JsonNode version(VersionedRecord<String> record) {
        ArrayNode row = JSON.createArrayNode();
        row.add(record.value());
        row.add(record.timestamp());
        if (record.validTo().isPresent()) {
            row.add(record.validTo().get());
        } else {
            row.addNull();
        }
        return row;
    }

    private static <R> R result(StateStore store, org.apache.kafka.streams.query.Query<R> query) {
        QueryResult<R> result = store.query(query, PositionBound.unbounded(), new QueryConfig(false));
        if (!result.isSuccess()) {
            throw new IllegalStateException(result.getFailureReason() + ": " + result.getFailureMessage());
        }
        return result.getResult();
    }

    static ArrayNode run(TopologyTestDriver driver, JsonNode queries) {
        ArrayNode out = JSON.createArrayNode();
        for (JsonNode q : queries) {
            StateStore store = driver.<String, String>getVersionedKeyValueStore(q.get(0).asText());
            String key = q.get(1).asText();
            if (q.size() == 3) {
                VersionedKeyQuery<String, String> query = VersionedKeyQuery.withKey(key);
                if (!q.get(2).isNull()) {
                    query = query.asOf(Instant.ofEpochMilli(q.get(2).asLong()));
                }
                VersionedRecord<String> record = result(store, query);
                if (record == null) {
                    out.addNull();
                } else {
                    out.add(version(record));
                }
                continue;
            }
            MultiVersionedKeyQuery<String, String> query = MultiVersionedKeyQuery.withKey(key);
            if (!q.get(2).isNull()) {
                query = query.fromTime(Instant.ofEpochMilli(q.get(2).asLong()));
            }
            if (!q.get(3).isNull()) {
                query = query.toTime(Instant.ofEpochMilli(q.get(3).asLong()));
            }
            String order = q.get(4).asText();
            if (order.equals("asc")) {
                query = query.withAscendingTimestamps();
            } else if (order.equals("desc")) {
                query = query.withDescendingTimestamps();
            }
            ArrayNode versions = out.addArray();
            try (VersionedRecordIterator<String> it = result(store, query)) {
                it.forEachRemaining(record -> versions.add(version(record)));
            }
        }
        return out;
    }
}
