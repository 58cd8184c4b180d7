import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.processor.internals.InternalTopologyBuilder;

/**
 * The describe() half of kappaflow's naming conformance (issue 27, item 8).
 *
 * <p>Writes, for every topology of scenarios.json (built by Topologies.java) and for the Java twins of the
 * project's example apps (examples/*.py, written below), the text of Kafka Streams 4.3.1's
 * {@code Topology.describe()}: the node, store and internal topic names Java generates, the node order and the
 * layout. tests/conformance/test_describe.py compares kappaflow's describe() with it byte for byte.
 *
 * <p>Usage: java -cp classes:libs/* Describe scenarios.json describe_golden.json (make conformance-golden)
 */
public final class Describe {
    private static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

    static final String APP = "app";

    private Describe() {}

    public static void main(String[] args) throws Exception {
        JsonNode doc = JSON.readTree(new File(args[0]));
        ObjectNode golden = JSON.createObjectNode();
        golden.put("kafka_streams_version", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        ObjectNode scenarios = golden.putObject("scenarios");
        for (JsonNode scenario : doc.get("scenarios")) {
            Topology topology = Topologies.build(scenario.get("topology").asText(), scenario.get("params")).topology;
            scenarios.set(scenario.get("id").asText(), describe(topology));
        }
        ObjectNode examples = golden.putObject("examples");
        for (Map.Entry<String, Topology> example : examples().entrySet()) {
            examples.set(example.getKey(), describe(example.getValue()));
        }
        java.nio.file.Files.writeString(new File(args[1]).toPath(), JSON.writeValueAsString(golden) + "\n");
    }

    /** describe()'s text and the full names of the internal topics Kafka Streams would create for "app". */
    static ObjectNode describe(Topology topology) throws ReflectiveOperationException {
        ObjectNode out = JSON.createObjectNode();
        out.put("describe", topology.describe().toString());
        java.lang.reflect.Field field = Topology.class.getDeclaredField("internalTopologyBuilder");
        field.setAccessible(true);
        InternalTopologyBuilder internal = (InternalTopologyBuilder) field.get(topology);
        java.util.Properties props = new java.util.Properties();
        props.put(org.apache.kafka.streams.StreamsConfig.APPLICATION_ID_CONFIG, APP);
        props.put(org.apache.kafka.streams.StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "dummy:1234");
        internal.rewriteTopology(new org.apache.kafka.streams.StreamsConfig(props));
        internal.buildTopology(); // names the changelog topics, as a starting KafkaStreams does
        internal.buildGlobalStateTopology();
        TreeSet<String> topics = new TreeSet<>();

        for (InternalTopologyBuilder.TopicsInfo info : internal.subtopologyToTopicsInfo().values()) {
            topics.addAll(info.repartitionSourceTopics.keySet());
            // a table's source topic serving as its changelog (topology.optimization) is no internal topic
            info.nonSourceChangelogTopics().forEach(config -> topics.add(config.name()));
        }
        topics.forEach(out.putArray("internal_topics")::add);
        // KIP-1111: what ensure.explicit.internal.resource.naming=true would refuse, in Java's words
        java.lang.reflect.Field ensure = InternalTopologyBuilder.class.getDeclaredField("ensureExplicitInternalResourceNaming");
        ensure.setAccessible(true);
        ensure.setBoolean(internal, true);
        String unnamed = "";
        try {
            internal.checkUnprovidedNames();
        } catch (org.apache.kafka.streams.errors.TopologyException e) {
            unnamed = e.getMessage();
        }
        out.put("unnamed", unnamed);
        return out;
    }

    /** The Java twins of examples/*.py, keyed by the Python entry point; keep both in step. */
    static Map<String, Topology> examples() {
        Map<String, Topology> all = new TreeMap<>();
        all.put("examples.wordcount:build_topology", wordcount());
        all.put("examples.pageview_join:build_topology", pageviewJoin());
        all.put("examples.windowed_fraud:build_topology", windowedFraud());
        all.put("examples.queryable_app:build_topology", queryableApp());
        return all;
    }

    private static Topology wordcount() {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, String> lines = b.stream("wordcount-input");
        lines.flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .groupBy((k, word) -> word)
                .count(Materialized.as("counts"))
                .toStream()
                .to("wordcount-output", Produced.with(Serdes.String(), Serdes.Long()));
        return b.build();
    }

    private static Topology pageviewJoin() {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, String> views = b.stream("pageviews");
        KTable<String, String> users = b.table("users", Materialized.as("users"));
        KStream<String, String> clicks = b.stream("clicks");
        KStream<String, String> enriched = views.leftJoin(users, (view, user) -> view + user);
        enriched.to("pageviews-enriched");
        views.join(clicks, (view, click) -> view + click,
                        JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMinutes(5), Duration.ZERO),
                        StreamJoined.<String, String, String>as("view-click").withName("view-click"))
                .to("view-clicks");
        enriched.groupBy((user, view) -> view)
                .count(Materialized.as("region-counts"))
                .toStream()
                .to("views-per-region", Produced.with(Serdes.String(), Serdes.Long()));
        return b.build();
    }

    private static Topology windowedFraud() {
        StreamsBuilder b = new StreamsBuilder();
        KStream<String, String> payments = b.stream("payments");
        KTable<org.apache.kafka.streams.kstream.Windowed<String>, String> summaries = payments
                .filter((card, payment) -> payment != null)
                .groupByKey()
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofSeconds(10)))
                .aggregate(() -> "", (card, payment, summary) -> summary + payment, Materialized.as("payment-windows"));
        summaries.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream()
                .mapValues(summary -> summary)
                .filter((window, verdict) -> verdict != null)
                .to("fraud-alerts", Produced.with(
                        org.apache.kafka.streams.kstream.WindowedSerdes.timeWindowedSerdeFrom(String.class, 60_000L),
                        Serdes.String()));
        return b.build();
    }

    private static Topology queryableApp() {
        StreamsBuilder b = new StreamsBuilder();
        KGroupedStream<String, String> words = b.<String, String>stream("queryable-input")
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
                .groupBy((k, word) -> word);
        words.count(Materialized.as("word-counts"));
        words.windowedBy(TimeWindows.ofSizeWithNoGrace(Duration.ofMinutes(1))).count(Materialized.as("word-counts-per-minute"));
        words.windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofMinutes(5), Duration.ZERO))
                .count(Materialized.as("word-sessions"));
        return b.build();
    }
}
