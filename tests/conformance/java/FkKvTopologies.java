import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;
import java.util.function.BiFunction;
import java.util.function.Function;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The "fkkv_" topology families (issue 27, KIP-1104: a foreign-key extractor over the key and the value);
 * tests/conformance/topologies_fkkv.py is their Python half, where the parameters are described. Kept apart
 * from Topologies.java so the families other work adds there do not collide with these.
 */
final class FkKvTopologies {
    private FkKvTopologies() {}

    private static final ValueJoiner<String, String, String> JOIN = (a, b) -> a + "+" + b;

    private static String before(String text, String sep) {
        int at = text.indexOf(sep);
        return at < 0 ? null : text.substring(0, at);
    }

    private static KTable<String, String> table(StreamsBuilder b, String topic, JsonNode p) {
        String store = topic + "-store";
        if (p.has("history")) {
            return b.table(topic, Materialized.<String, String>as(Stores.persistentVersionedKeyValueStore(
                    store, Duration.ofMillis(p.get("history").asLong()))));
        }
        return b.table(topic, Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(store));
    }

    private static Materialized<String, String, KeyValueStore<Bytes, byte[]>> result(JsonNode p) {
        return p.has("materialized")
                ? Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(p.get("materialized").asText())
                : null;
    }

    static Topologies.Spec build(String family, JsonNode p) {
        if (!family.equals("fkkv_join")) {
            return null;
        }
        StreamsBuilder b = new StreamsBuilder();
        KTable<String, String> left = table(b, "left", p);
        KTable<String, String> right = table(b, "right", p);
        boolean leftJoin = p.has("kind") && p.get("kind").asText().equals("left");
        String extract = p.has("extract") ? p.get("extract").asText() : "key_or_value";
        Materialized<String, String, KeyValueStore<Bytes, byte[]>> mat = result(p);
        KTable<String, String> joined;
        if (extract.equals("value")) {
            Function<String, String> fk = v -> before(v, "|");
            joined = mat == null
                    ? (leftJoin ? left.leftJoin(right, fk, JOIN) : left.join(right, fk, JOIN))
                    : (leftJoin ? left.leftJoin(right, fk, JOIN, mat) : left.join(right, fk, JOIN, mat));
        } else {
            BiFunction<String, String, String> fk = extract.equals("key")
                    ? (k, v) -> before(k, ".")
                    : (k, v) -> before(v, "|") != null ? before(v, "|") : before(k, ".");
            joined = mat == null
                    ? (leftJoin ? left.leftJoin(right, fk, JOIN) : left.join(right, fk, JOIN))
                    : (leftJoin ? left.leftJoin(right, fk, JOIN, mat) : left.join(right, fk, JOIN, mat));
        }
        joined.toStream().to("out");
        return new Topologies.Spec(b.build(), Map.of("out", "string"));
    }
}
