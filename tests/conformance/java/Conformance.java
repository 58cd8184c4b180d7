import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.nio.file.Files;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeSet;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.test.TestRecord;

/**
 * The Java half of kappaflow's differential conformance suite.
 *
 * <p>Reads tests/conformance/scenarios.json (inputs shared with the Python half), builds each scenario's
 * topology (Topologies.java, one builder per topology family, mirrored by tests/conformance/topologies.py),
 * runs it through Kafka Streams' own TopologyTestDriver and writes what came out - every output record with
 * the index of the input step after which it appeared, plus the requested store contents - as the golden file
 * the Python half compares against record for record.
 *
 * <p>Usage: java -cp classes:libs/* Conformance scenarios.json golden.json
 */
public final class Conformance {
    private static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

    private Conformance() {}

    public static void main(String[] args) throws Exception {
        JsonNode doc = JSON.readTree(new File(args[0]));
        ObjectNode golden = JSON.createObjectNode();
        golden.put("kafka_streams_version", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        ObjectNode results = golden.putObject("scenarios");
        for (JsonNode scenario : doc.get("scenarios")) {
            String id = scenario.get("id").asText();
            try {
                results.set(id, run(scenario));
            } catch (RuntimeException e) {
                throw new IllegalStateException("scenario " + id + " failed: " + e, e);
            }
        }
        StringBuilder out = new StringBuilder(JSON.writeValueAsString(golden));
        java.nio.file.Files.writeString(new File(args[1]).toPath(), out.append('\n').toString());
    }

    /** This process's own state directory: runs from several clones at once must not share one. */
    private static final String STATE_DIR = stateDir();

    private static String stateDir() {
        try {
            File dir = Files.createTempDirectory("kappaflow-conformance-").toFile();
            dir.deleteOnExit(); // empty by then: each driver's close() removes its task directories
            return dir.getPath();
        } catch (java.io.IOException e) {
            throw new IllegalStateException("cannot create a state directory", e);
        }
    }

    private static ObjectNode run(JsonNode scenario) {
        Topologies.Spec spec = Topologies.build(scenario.get("topology").asText(), scenario.get("params"));
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "conformance");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "dummy:1234");
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        boolean cache = !scenario.has("cache") || scenario.get("cache").asBoolean();
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, cache ? 10L * 1024 * 1024 : 0L);
        if (scenario.has("handler") && scenario.get("handler").asText().equals("continue")) {
            props.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_CLASS_CONFIG,
                    org.apache.kafka.streams.errors.LogAndContinueProcessingExceptionHandler.class);
        }
        props.put(StreamsConfig.STATE_DIR_CONFIG, STATE_DIR);
        ObjectNode result = JSON.createObjectNode();
        ArrayNode records = result.putArray("records");
        TreeSet<String> keys = new TreeSet<>();
        try (TopologyTestDriver driver = new TopologyTestDriver(spec.topology, props, Instant.ofEpochMilli(0))) {
            Map<String, TestInputTopic<String, String>> inputs = new LinkedHashMap<>();
            Map<String, TestOutputTopic<String, ?>> outputs = new LinkedHashMap<>();
            for (Map.Entry<String, String> output : spec.outputs.entrySet()) {
                Deserializer<?> values = output.getValue().equals("long")
                        ? Serdes.Long().deserializer() : Serdes.String().deserializer();
                outputs.put(output.getKey(), driver.createOutputTopic(
                        output.getKey(), Serdes.String().deserializer(), values));
            }
            int index = 0;
            for (JsonNode step : scenario.get("steps")) {
                String topic = step.get(0).asText();
                if (topic.equals("@wall")) {
                    driver.advanceWallClockTime(Duration.ofMillis(step.get(1).asLong()));
                } else {
                    TestInputTopic<String, String> input = inputs.computeIfAbsent(topic,
                            t -> driver.createInputTopic(t, new StringSerializer(), new StringSerializer()));
                    String key = text(step.get(1));
                    if (key != null) {
                        keys.add(key);
                    }
                    input.pipeInput(key, text(step.get(2)), step.get(3).asLong());
                }
                for (Map.Entry<String, TestOutputTopic<String, ?>> output : outputs.entrySet()) {
                    for (TestRecord<String, ?> record : output.getValue().readRecordsToList()) {
                        ArrayNode row = records.addArray();
                        row.add(index);
                        row.add(output.getKey());
                        row.add(record.key());
                        row.addPOJO(record.value());
                        row.add(record.timestamp());
                    }
                }
                index++;
            }
            if (scenario.has("stores")) {
                ObjectNode stores = result.putObject("stores");
                for (JsonNode store : scenario.get("stores")) {
                    stores.set(store.get(1).asText(), dump(driver, store.get(0).asText(), store.get(1).asText(), keys));
                }
            }
            if (scenario.has("queries")) {
                result.set("queries", VersionedQueries.run(driver, scenario.get("queries")));
            }
        }
        return result;
    }

    private static String text(JsonNode node) {
        return node == null || node.isNull() ? null : node.asText();
    }

    private static ArrayNode dump(TopologyTestDriver driver, String kind, String name, TreeSet<String> keys) {
        List<KeyValue<String, Object>> rows = new ArrayList<>();
        switch (kind) {
            case "kv": {
                try (KeyValueIterator<Object, Object> it = driver.getKeyValueStore(name).all()) {
                    it.forEachRemaining(kv -> rows.add(KeyValue.pair(String.valueOf(kv.key), kv.value)));
                }
                break;
            }
            case "window": {
                try (KeyValueIterator<Windowed<Object>, Object> it = driver.getWindowStore(name).all()) {
                    it.forEachRemaining(kv -> rows.add(KeyValue.pair(Topologies.windowed(kv.key), kv.value)));
                }
                break;
            }
            case "session": {
                for (String key : keys) {
                    try (KeyValueIterator<Windowed<Object>, Object> it = driver.getSessionStore(name).fetch(key)) {
                        it.forEachRemaining(kv -> rows.add(KeyValue.pair(Topologies.windowed(kv.key), kv.value)));
                    }
                }
                break;
            }
            default:
                throw new IllegalArgumentException("unknown store kind " + kind);
        }
        ArrayNode out = JSON.createArrayNode();
        for (KeyValue<String, Object> row : rows) {
            ArrayNode pair = out.addArray();
            pair.add(row.key);
            pair.addPOJO(row.value);
        }
        return out;
    }
}
