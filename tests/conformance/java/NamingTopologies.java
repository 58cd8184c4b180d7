import com.fasterxml.jackson.databind.JsonNode;
import java.util.Map;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.ValueTransformerWithKey;
import org.apache.kafka.streams.processor.ProcessorContext;

/**
 * The "nm_" topology families (issue 27: generated names, Branched, the old-style transformer context);
 * tests/conformance/topologies_nm.py is their Python half. Kept apart from Topologies.java so the families
 * other work adds there do not collide with these.
 */
final class NamingTopologies {
    private NamingTopologies() {}

    /** Writes value|topic/partition/offset/timestamp/header count from the old-style context. */
    static final class ContextEcho implements ValueTransformerWithKey<String, String, String> {
        private ProcessorContext context;

        @Override
        public void init(ProcessorContext context) {
            this.context = context;
        }

        @Override
        public String transform(String key, String value) {
            return value + "|" + context.topic() + "/" + context.partition() + "/" + context.offset() + "/"
                    + context.timestamp() + "/" + context.headers().toArray().length;
        }

        @Override
        public void close() { }
    }

    static Topologies.Spec build(String family, JsonNode p) {
        StreamsBuilder b = new StreamsBuilder();
        Map<String, String> outputs = Map.of("out", "string");
        switch (family) {
            case "nm_transform_values_context":
                b.<String, String>table("in").transformValues(ContextEcho::new).toStream().to("out");
                break;
            case "nm_branched": {
                // unnamed split(): branches <splitter><index>; a function's result replaces its branch,
                // a consumer's branch is left out of the map
                Map<String, KStream<String, String>> branches = b.<String, String>stream("in").split()
                        .branch((k, v) -> v.startsWith("a"), Branched.withFunction(s -> s.mapValues(v -> v + "!")))
                        .branch((k, v) -> v.startsWith("b"), Branched.withConsumer(s -> s.to("out-b")))
                        .branch((k, v) -> v.startsWith("c"), Branched.withFunction(s -> null, "c"))
                        .defaultBranch();
                if (branches.size() != 2) {
                    throw new IllegalStateException("expected 2 branches, got " + branches.keySet());
                }
                for (Map.Entry<String, KStream<String, String>> branch : new java.util.TreeMap<>(branches).entrySet()) {
                    branch.getValue().mapValues(v -> branch.getKey() + ":" + v).to("out");
                }
                outputs = Map.of("out", "string", "out-b", "string");
                break;
            }
            case "nm_two_globals": {
                // global stores numbered with the sub-topologies, in creation order; an unnamed global
                // table's store; named operations using up numbers; an unnamed repartitioned count
                org.apache.kafka.streams.kstream.GlobalKTable<String, String> first = b.globalTable("g1");
                KStream<String, String> in = b.<String, String>stream("in")
                        .filter((k, v) -> v != null, org.apache.kafka.streams.kstream.Named.as("present"));
                KStream<String, String> joined = in.join(first, (k, v) -> v, (v, g) -> v + "+" + g);
                org.apache.kafka.streams.kstream.GlobalKTable<String, String> second = b.globalTable("g2",
                        org.apache.kafka.streams.kstream.Materialized.as("second"));
                joined.leftJoin(second, (k, v) -> k, (v, g) -> v + "+" + g).to("out");
                in.selectKey((k, v) -> v).groupByKey().count().toStream().mapValues(String::valueOf).to("out-count");
                outputs = Map.of("out", "string", "out-count", "string");
                break;
            }
            case "nm_named_ops": {
                // user names next to generated ones: a named stream-stream join over re-keyed streams, a
                // re-keyed toTable, a named repartition and grouping, an unnamed windowed count
                KStream<String, String> left = b.<String, String>stream("in").selectKey((k, v) -> v);
                KStream<String, String> right = b.<String, String>stream("in2").selectKey((k, v) -> v);
                left.join(right, (a, c) -> a + "+" + c,
                        org.apache.kafka.streams.kstream.JoinWindows.ofTimeDifferenceWithNoGrace(java.time.Duration.ofMillis(10)),
                        org.apache.kafka.streams.kstream.StreamJoined.<String, String, String>as("sj").withName("sj"))
                        .to("out");
                left.toTable().toStream().to("out-table");
                left.repartition(org.apache.kafka.streams.kstream.Repartitioned.as("rp"))
                        .groupByKey(org.apache.kafka.streams.kstream.Grouped.as("g"))
                        .windowedBy(org.apache.kafka.streams.kstream.TimeWindows.ofSizeWithNoGrace(java.time.Duration.ofMillis(10)))
                        .count()
                        .toStream((k, v) -> k.key() + "@" + k.window().start())
                        .mapValues(String::valueOf)
                        .to("out-count");
                outputs = Map.of("out", "string", "out-table", "string", "out-count", "string");
                break;
            }
            case "nm_unnamed_windows": {
                // unnamed windowed, session and sliding counts (stores named before their processors) and
                // an unnamed table aggregation
                org.apache.kafka.streams.kstream.KGroupedStream<String, String> grouped =
                        b.<String, String>stream("in").groupByKey();
                grouped.windowedBy(org.apache.kafka.streams.kstream.TimeWindows.ofSizeWithNoGrace(java.time.Duration.ofMillis(10)))
                        .count()
                        .toStream((k, v) -> k.key() + "@" + k.window().start())
                        .mapValues(String::valueOf).to("out");
                grouped.windowedBy(org.apache.kafka.streams.kstream.SessionWindows.ofInactivityGapWithNoGrace(java.time.Duration.ofMillis(5)))
                        .count()
                        .toStream((k, v) -> k.key() + "@" + k.window().start() + "/" + k.window().end())
                        .mapValues(v -> String.valueOf(v)).to("out-session");
                grouped.windowedBy(org.apache.kafka.streams.kstream.SlidingWindows.ofTimeDifferenceWithNoGrace(java.time.Duration.ofMillis(5)))
                        .count()
                        .toStream((k, v) -> k.key() + "@" + k.window().start())
                        .mapValues(String::valueOf).to("out-sliding");
                b.<String, String>table("t").groupBy((k, v) -> KeyValue.pair(v, v)).count()
                        .toStream().mapValues(String::valueOf).to("out-table");
                outputs = Map.of("out", "string", "out-session", "string", "out-sliding", "string", "out-table", "string");
                break;
            }
            default:
                throw new IllegalArgumentException("unknown topology family " + family);
        }
        return new Topologies.Spec(b.build(), new java.util.TreeMap<>(outputs));
    }
}
