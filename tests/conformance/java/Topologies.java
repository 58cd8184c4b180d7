import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.SessionStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.state.WindowStore;

/**
 * One builder per topology family of the conformance suite; tests/conformance/topologies.py builds the same
 * families in kappaflow. Conventions shared by both halves: keys and values are strings; a windowed key goes
 * out as "key@start/end"; a joiner writes "left+right" (a missing side is "null"); numbers travel as decimal
 * strings unless the output is declared "long".
 */
final class Topologies {
    private Topologies() {}

    /** A built topology and its output topics, each with the value type it is read as. */
    static final class Spec {
        final Topology topology;
        final Map<String, String> outputs;

        Spec(Topology topology, Map<String, String> outputs) {
            this.topology = topology;
            this.outputs = outputs;
        }
    }

    static String windowed(Windowed<?> key) {
        return key.key() + "@" + key.window().start() + "/" + key.window().end();
    }

    private static final ValueJoiner<String, String, String> JOIN = (a, b) -> a + "+" + b;

    private static boolean startsA(String v) {
        return v != null && v.startsWith("a");
    }

    private static String sum(String a, String b) {
        return String.valueOf(Long.parseLong(a) + Long.parseLong(b));
    }

    private static String diff(String a, String b) {
        return String.valueOf(Long.parseLong(a) - Long.parseLong(b));
    }

    private static long num(JsonNode params, String name) {
        return params.get(name).asLong();
    }

    private static boolean flag(JsonNode params, String name) {
        return params != null && params.has(name) && params.get(name).asBoolean();
    }

    private static String str(JsonNode params, String name, String dflt) {
        return params != null && params.has(name) ? params.get(name).asText() : dflt;
    }

    private static Map<String, String> out(String... pairs) {
        Map<String, String> outputs = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            outputs.put(pairs[i], pairs[i + 1]);
        }
        return outputs;
    }

    private static Materialized<String, String, KeyValueStore<Bytes, byte[]>> kv(String name) {
        return Materialized.as(name);
    }

    private static TimeWindows timeWindows(JsonNode p) {
        TimeWindows windows = p.has("grace")
                ? TimeWindows.ofSizeAndGrace(Duration.ofMillis(num(p, "size")), Duration.ofMillis(num(p, "grace")))
                : TimeWindows.ofSizeWithNoGrace(Duration.ofMillis(num(p, "size")));
        return p.has("advance") ? windows.advanceBy(Duration.ofMillis(num(p, "advance"))) : windows;
    }

    private static SlidingWindows slidingWindows(JsonNode p) {
        return p.has("grace")
                ? SlidingWindows.ofTimeDifferenceAndGrace(
                        Duration.ofMillis(num(p, "diff")), Duration.ofMillis(num(p, "grace")))
                : SlidingWindows.ofTimeDifferenceWithNoGrace(Duration.ofMillis(num(p, "diff")));
    }

    private static SessionWindows sessionWindows(JsonNode p) {
        return p.has("grace")
                ? SessionWindows.ofInactivityGapAndGrace(Duration.ofMillis(num(p, "gap")), Duration.ofMillis(num(p, "grace")))
                : SessionWindows.ofInactivityGapWithNoGrace(Duration.ofMillis(num(p, "gap")));
    }

    private static JoinWindows joinWindows(JsonNode p) {
        JoinWindows windows = p.has("grace")
                ? JoinWindows.ofTimeDifferenceAndGrace(Duration.ofMillis(num(p, "diff")), Duration.ofMillis(num(p, "grace")))
                : JoinWindows.ofTimeDifferenceWithNoGrace(Duration.ofMillis(num(p, "diff")));
        if (p.has("before")) {
            windows = windows.before(Duration.ofMillis(num(p, "before")));
        }
        if (p.has("after")) {
            windows = windows.after(Duration.ofMillis(num(p, "after")));
        }
        return windows;
    }

    private static void windowedOut(KTable<Windowed<String>, String> table) {
        table.toStream((k, v) -> windowed(k)).to("out");
    }

    private static void windowedLongOut(KTable<Windowed<String>, Long> table) {
        table.toStream((k, v) -> windowed(k)).to("out", Produced.with(Serdes.String(), Serdes.Long()));
    }

    /** Forwards every record and, on each punctuation, ("tick", records seen so far) at the punctuation time. */
    static final class Ticker implements Processor<String, String, String, String> {
        private final PunctuationType type;
        private final long interval;
        private ProcessorContext<String, String> context;
        private long seen;

        Ticker(PunctuationType type, long interval) {
            this.type = type;
            this.interval = interval;
        }

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            context.schedule(Duration.ofMillis(interval), type,
                    ts -> this.context.forward(new Record<>("tick", String.valueOf(seen), ts)));
        }

        @Override
        public void process(Record<String, String> record) {
            seen++;
            context.forward(record);
        }
    }

    // ================================================================ ph- block (issue 27 items 4-7, 9)
    /** "topic/partition/offset" of context.recordMetadata(), "none" when absent. */
    static String meta(ProcessorContext<?, ?> context) {
        return context.recordMetadata().map(m -> m.topic() + "/" + m.partition() + "/" + m.offset()).orElse("none");
    }

    /**
     * Punctuation-queue rules: A (scheduled at init) schedules B on its first run (due in the same round for
     * stream time) and cancels C (scheduled after A, same interval) on its second; B cancels itself after its
     * third run. Every output carries the record metadata the context reports at that moment.
     */
    static final class PunctuationChain implements Processor<String, String, String, String> {
        private final PunctuationType type;
        private final long interval;
        private final long inner;
        private ProcessorContext<String, String> context;
        private org.apache.kafka.streams.processor.Cancellable b;
        private org.apache.kafka.streams.processor.Cancellable c;
        private int aRuns;
        private int bRuns;

        PunctuationChain(PunctuationType type, long interval, long inner) {
            this.type = type;
            this.interval = interval;
            this.inner = inner;
        }

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            context.schedule(Duration.ofMillis(interval), type, this::tickA);
            c = context.schedule(Duration.ofMillis(interval), type,
                    ts -> this.context.forward(new Record<>("C", ts + "|" + meta(this.context), ts)));
        }

        private void tickA(long ts) {
            aRuns++;
            context.forward(new Record<>("A", ts + "|" + meta(context), ts));
            if (aRuns == 1) {
                b = context.schedule(Duration.ofMillis(inner), type, this::tickB);
            } else if (aRuns == 2) {
                c.cancel();
            }
        }

        private void tickB(long ts) {
            bRuns++;
            context.forward(new Record<>("B", ts + "|" + meta(context), ts));
            if (bRuns == 3) {
                b.cancel();
            }
        }

        @Override
        public void process(Record<String, String> record) {
            context.forward(record.withValue(record.value() + "|" + meta(context)));
        }
    }

    /** Forwards each record; a stream-time punctuator forwards ("tick", seen) and then throws when seen is even. */
    static final class FailingTicker implements Processor<String, String, String, String> {
        private ProcessorContext<String, String> context;
        private long seen;

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            context.schedule(Duration.ofMillis(10), PunctuationType.STREAM_TIME, ts -> {
                this.context.forward(new Record<>("tick", String.valueOf(seen), ts));
                if (seen % 2 == 0) {
                    throw new IllegalStateException("punctuator failed at " + ts);
                }
            });
        }

        @Override
        public void process(Record<String, String> record) {
            seen++;
            if ("boom".equals(record.value())) {
                throw new IllegalStateException("processor failed on " + record.key());
            }
            context.forward(record);
        }
    }

    static String failOn(String v, String marker) {
        if (v != null && v.contains(marker)) {
            throw new IllegalStateException("failing on " + v);
        }
        return v;
    }

    static Spec buildPh(String family, JsonNode p) {
        StreamsBuilder b = new StreamsBuilder();
        Map<String, String> outputs = out("out", "string");
        switch (family) {
            case "ph_punctuation_queue": {
                PunctuationType type = str(p, "type", "stream").equals("wall")
                        ? PunctuationType.WALL_CLOCK_TIME : PunctuationType.STREAM_TIME;
                b.<String, String>stream("in")
                        .process(() -> new PunctuationChain(type, num(p, "interval"), num(p, "inner"))).to("out");
                break;
            }
            case "ph_handler_siblings": {
                KStream<String, String> in = b.stream("in");
                in.mapValues(v -> failOn(v, "x").toUpperCase()).to("out-a");
                in.mapValues(v -> v + "!").to("out-b");
                in.groupByKey().count(Materialized.as("counts")).toStream()
                        .to("out-c", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out-a", "string", "out-b", "string", "out-c", "long");
                break;
            }
            case "ph_handler_chain": {
                KStream<String, String> in = b.stream("in");
                KStream<String, String> upper = in.filter((k, v) -> v != null).mapValues(v -> v.toUpperCase());
                upper.mapValues(v -> failOn(v, "X") + "?").to("out-a");
                upper.mapValues(v -> v + "!").to("out-b");
                in.flatMapValues(v -> java.util.Arrays.asList(v.split(",")))
                        .mapValues(v -> failOn(v, "x") + "#").to("out-c");
                outputs = out("out-a", "string", "out-b", "string", "out-c", "string");
                break;
            }
            case "ph_handler_punctuate": {
                b.<String, String>stream("in").process(FailingTicker::new)
                        .mapValues(v -> failOn(v, "x") + ".").to("out");
                break;
            }
            case "ph_order_repartitions": {
                KStream<String, String> parts = b.<String, String>stream("in")
                        .flatMap((k, v) -> {
                            List<KeyValue<String, String>> kvs = new ArrayList<>();
                            for (String part : v.split(",")) {
                                kvs.add(KeyValue.pair(part, k + ":" + part));
                            }
                            return kvs;
                        })
                        .repartition();
                parts.mapValues(v -> "1:" + v).to("out");
                parts.selectKey((k, v) -> k + "'").repartition().mapValues(v -> "2:" + v).to("out");
                break;
            }
            case "ph_order_merge": {
                KStream<String, String> rekeyed = b.<String, String>stream("in").selectKey((k, v) -> v).repartition();
                rekeyed.merge(b.stream("in2")).mapValues((k, v) -> k + "=" + v).to("out");
                break;
            }
            case "ph_order_ticker": {
                b.<String, String>stream("in").filter((k, v) -> startsA(v)).repartition()
                        .process(() -> new Ticker(PunctuationType.STREAM_TIME, num(p, "interval"))).to("out");
                break;
            }
            case "ph_suppress_bytes": {
                KTable<String, String> table = b.table("in", kv("store"));
                table.suppress(Suppressed.untilTimeLimit(Duration.ofMillis(num(p, "limit")),
                        Suppressed.BufferConfig.maxBytes(num(p, "bytes")))).toStream().to("out");
                break;
            }
            case "ph_suppress_bytes_group": {
                KTable<String, Long> counts = b.<String, String>stream("in").groupByKey().count(Materialized.as("counts"));
                counts.suppress(Suppressed.untilTimeLimit(Duration.ofMillis(num(p, "limit")),
                        Suppressed.BufferConfig.maxBytes(num(p, "bytes")))).toStream()
                        .to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            }
            default:
                return null;
        }
        return new Spec(b.build(), outputs);
    }
    // ================================================================ end of the ph- block

    // ================================================================ vt- block (issue 27 items 1-3)
    static Materialized<String, String, KeyValueStore<Bytes, byte[]>> versioned(String name, JsonNode p) {
        return Materialized.<String, String>as(Stores.persistentVersionedKeyValueStore(
                name, Duration.ofMillis(num(p, "history"))));
    }

    static Spec buildVt(String family, JsonNode p) {
        StreamsBuilder b = new StreamsBuilder();
        Map<String, String> outputs = out("out", "string");
        String kind = str(p, "kind", "inner");
        switch (family) {
            case "vt_group_count": {
                b.<String, String>table("in", versioned("store", p)).groupBy((k, v) -> KeyValue.pair(v, k))
                        .count(Materialized.as("counts")).toStream()
                        .to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            }
            case "vt_group_aggregate": {
                b.<String, String>table("in", versioned("store", p))
                        .groupBy((k, v) -> KeyValue.pair(k.substring(0, 1), v))
                        .aggregate(() -> "", (k, v, a) -> a + "+" + v, (k, v, a) -> a + "-" + v, kv("agg"))
                        .toStream().to("out");
                break;
            }
            case "vt_table_join": {
                KTable<String, String> left = b.table("left", versioned("left-store", p));
                KTable<String, String> right = b.table("right", versioned("right-store", p));
                KTable<String, String> joined = kind.equals("inner") ? left.join(right, JOIN)
                        : kind.equals("left") ? left.leftJoin(right, JOIN) : left.outerJoin(right, JOIN);
                joined.toStream().to("out");
                break;
            }
            case "vt_filter": {
                b.<String, String>table("in", versioned("store", p)).filter((k, v) -> startsA(v)).toStream().to("out");
                break;
            }
            case "vt_fk_join": {
                KTable<String, String> left = b.table("left", versioned("left-store", p));
                KTable<String, String> right = b.table("right", versioned("right-store", p));
                java.util.function.Function<String, String> fk = v -> v.contains("|") ? v.split("\\|")[0] : null;
                (kind.equals("left") ? left.leftJoin(right, fk, JOIN) : left.join(right, fk, JOIN)).toStream().to("out");
                break;
            }
            case "vt_stream_join": {
                KTable<String, String> right = b.table("right", versioned("right-store", p));
                b.<String, String>stream("left").leftJoin(right, JOIN).to("out");
                break;
            }
            case "vt_chain_group_count": {
                KTable<String, String> source = b.table("in", versioned("store", p));
                KTable<String, String> chained = str(p, "via", "filter").equals("filter")
                        ? source.filter((k, v) -> !v.equals("drop"))
                        : source.mapValues(v -> v.toUpperCase(), kv("mapped"));
                chained.groupBy((k, v) -> KeyValue.pair(v, k)).count(Materialized.as("counts")).toStream()
                        .to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            }
            case "vt_mixed_table_join": {
                KTable<String, String> left = b.table("left", versioned("left-store", p));
                KTable<String, String> right = b.table("right", kv("right-store"));
                KTable<String, String> joined = kind.equals("inner") ? left.join(right, JOIN)
                        : kind.equals("left") ? left.leftJoin(right, JOIN) : left.outerJoin(right, JOIN);
                joined.toStream().to("out");
                break;
            }
            case "vt_derived_join": {
                String derive = str(p, "derive", "filter");
                boolean materialized = flag(p, "materialized");
                KTable<String, String> derived;
                if (derive.equals("to_table")) {
                    derived = b.<String, String>stream("right").toTable(versioned("derived", p));
                } else {
                    KTable<String, String> right = b.table("right", versioned("right-store", p));
                    if (derive.equals("filter")) {
                        derived = materialized ? right.filter((k, v) -> startsA(v), versioned("derived", p))
                                : right.filter((k, v) -> startsA(v));
                    } else {
                        derived = materialized ? right.mapValues(v -> v.toUpperCase(), versioned("derived", p))
                                : right.mapValues(v -> v.toUpperCase());
                    }
                }
                b.<String, String>stream("left").leftJoin(derived, JOIN).to("out");
                break;
            }
            default:
                return null;
        }
        return new Spec(b.build(), outputs);
    }
    // ================================================================ end of the vt- block

    @SuppressWarnings("checkstyle:MethodLength")
    static Spec build(String family, JsonNode p) {
        if (family.startsWith("vt_")) {
            Spec vt = buildVt(family, p);
            if (vt != null) {
                return vt;
            }
        }
        if (family.startsWith("ph_")) {
            Spec ph = buildPh(family, p);
            if (ph != null) {
                return ph;
            }
        }
        if (family.startsWith("opt_")) {
            return OptTopologies.build(family, p);
        }
        if (family.startsWith("nm_")) {
            return NamingTopologies.build(family, p);
        }
        if (family.startsWith("fkkv_")) {
            return FkKvTopologies.build(family, p);
        }
        if (family.startsWith("vq_")) {
            return VersionedQueries.build(family, p);
        }
        StreamsBuilder b = new StreamsBuilder();
        Map<String, String> outputs = out("out", "string");
        switch (family) {
            // ------------------------------------------------------------ stateless
            case "filter":
                b.<String, String>stream("in").filter((k, v) -> startsA(v)).to("out");
                break;
            case "filter_not":
                b.<String, String>stream("in").filterNot((k, v) -> startsA(v)).to("out");
                break;
            case "map":
                b.<String, String>stream("in").map((k, v) -> KeyValue.pair(v, k)).to("out");
                break;
            case "map_values":
                b.<String, String>stream("in").mapValues(v -> v == null ? null : v.toUpperCase()).to("out");
                break;
            case "map_values_with_key":
                b.<String, String>stream("in").mapValues((k, v) -> k + ":" + v).to("out");
                break;
            case "flat_map":
                b.<String, String>stream("in").flatMap((k, v) -> {
                    List<KeyValue<String, String>> result = new ArrayList<>();
                    for (String part : v.split(",")) {
                        result.add(KeyValue.pair(part, k));
                    }
                    return result;
                }).to("out");
                break;
            case "flat_map_values":
                b.<String, String>stream("in").flatMapValues(v -> List.of(v.split(","))).to("out");
                break;
            case "select_key":
                b.<String, String>stream("in").selectKey((k, v) -> v.substring(0, 1)).to("out");
                break;
            case "peek":
                b.<String, String>stream("in").peek((k, v) -> { }).to("out");
                break;
            case "branch": {
                Map<String, KStream<String, String>> branches = b.<String, String>stream("in").split(
                        org.apache.kafka.streams.kstream.Named.as("b-"))
                        .branch((k, v) -> startsA(v), Branched.as("a"))
                        .branch((k, v) -> v != null && v.startsWith("b"), Branched.as("b"))
                        .defaultBranch(Branched.as("rest"));
                branches.get("b-a").to("out-a");
                branches.get("b-b").to("out-b");
                branches.get("b-rest").to("out-rest");
                outputs = out("out-a", "string", "out-b", "string", "out-rest", "string");
                break;
            }
            case "branch_no_default": {
                Map<String, KStream<String, String>> branches = b.<String, String>stream("in").split(
                        org.apache.kafka.streams.kstream.Named.as("b-"))
                        .branch((k, v) -> startsA(v), Branched.as("x"))
                        .branch((k, v) -> v != null && v.length() > 3, Branched.as("y"))
                        .noDefaultBranch();
                branches.get("b-x").to("out-a");
                branches.get("b-y").to("out-b");
                outputs = out("out-a", "string", "out-b", "string");
                break;
            }
            case "merge":
                b.<String, String>stream("in").merge(b.stream("in2")).to("out");
                break;
            case "repartition":
                b.<String, String>stream("in").selectKey((k, v) -> v).repartition().mapValues((k, v) -> k + "<" + v).to("out");
                break;
            case "process_values":
                b.<String, String>stream("in").processValues(() -> new org.apache.kafka.streams.processor.api.FixedKeyProcessor<String, String, String>() {
                    private org.apache.kafka.streams.processor.api.FixedKeyProcessorContext<String, String> context;

                    @Override
                    public void init(org.apache.kafka.streams.processor.api.FixedKeyProcessorContext<String, String> context) {
                        this.context = context;
                    }

                    @Override
                    public void process(org.apache.kafka.streams.processor.api.FixedKeyRecord<String, String> record) {
                        context.forward(record.withValue(record.value() + "@" + record.timestamp()));
                        context.forward(record.withValue("again").withTimestamp(record.timestamp() + 1));
                    }
                }).to("out");
                break;
            case "to_table":
                b.<String, String>stream("in").toTable(kv("store")).toStream().to("out");
                break;
            // ------------------------------------------------------------ tables
            case "table_source":
                b.<String, String>table("in", kv("store")).toStream().to("out");
                break;
            case "table_filter": {
                KTable<String, String> table = flag(p, "unmaterialized_source") ? b.table("in") : b.table("in", kv("store"));
                (flag(p, "materialized") ? table.filter((k, v) -> startsA(v), kv("filtered"))
                        : table.filter((k, v) -> startsA(v))).toStream().to("out");
                break;
            }
            case "table_filter_not":
                b.<String, String>table("in", kv("store")).filterNot((k, v) -> startsA(v)).toStream().to("out");
                break;
            case "table_map_values": {
                KTable<String, String> table = b.table("in", kv("store"));
                (flag(p, "materialized") ? table.mapValues(v -> v.toUpperCase(), kv("mapped"))
                        : table.mapValues(v -> v.toUpperCase())).toStream().to("out");
                break;
            }
            case "table_group_count":
                b.<String, String>table("in", kv("store")).groupBy((k, v) -> KeyValue.pair(v, k))
                        .count(Materialized.as("counts")).toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            case "table_group_reduce":
                b.<String, String>table("in", kv("store")).groupBy((k, v) -> KeyValue.pair(k.substring(0, 1), v))
                        .reduce(Topologies::sum, Topologies::diff, kv("sums")).toStream().to("out");
                break;
            case "table_group_aggregate":
                b.<String, String>table("in", kv("store")).groupBy((k, v) -> KeyValue.pair(k.substring(0, 1), v))
                        .aggregate(() -> "", (k, v, a) -> a + "+" + v, (k, v, a) -> a + "-" + v, kv("agg"))
                        .toStream().to("out");
                break;
            case "table_join": {
                KTable<String, String> left = b.table("left", kv("left-store"));
                KTable<String, String> right = b.table("right", kv("right-store"));
                String kind = str(p, "kind", "inner");
                KTable<String, String> joined = kind.equals("inner") ? left.join(right, JOIN)
                        : kind.equals("left") ? left.leftJoin(right, JOIN) : left.outerJoin(right, JOIN);
                joined.toStream().to("out");
                break;
            }
            case "table_suppress_time":
                b.<String, String>table("in", kv("store").withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
                        .suppress(Suppressed.untilTimeLimit(Duration.ofMillis(num(p, "limit")),
                                Suppressed.BufferConfig.unbounded()))
                        .toStream().to("out");
                break;
            case "table_suppress_records":
                b.<String, String>table("in", kv("store").withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
                        .suppress(Suppressed.untilTimeLimit(Duration.ofMillis(num(p, "limit")),
                                Suppressed.BufferConfig.maxRecords(num(p, "records"))))
                        .toStream().to("out");
                break;
            case "table_suppress_group_count":
                b.<String, String>table("in", kv("store").withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
                        .suppress(Suppressed.untilTimeLimit(Duration.ofMillis(num(p, "limit")),
                                Suppressed.BufferConfig.unbounded()))
                        .groupBy((k, v) -> KeyValue.pair(v, k)).count(Materialized.as("counts"))
                        .toStream().to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            case "table_suppress_join": {
                KTable<String, String> left = b.table("left", kv("left-store").withKeySerde(Serdes.String()).withValueSerde(Serdes.String()));
                KTable<String, String> right = b.table("right", kv("right-store"));
                KTable<String, String> suppressed = left.suppress(Suppressed.untilTimeLimit(
                        Duration.ofMillis(num(p, "limit")), Suppressed.BufferConfig.unbounded()));
                (flag(p, "suppressed_right") ? right.join(suppressed, JOIN) : suppressed.join(right, JOIN))
                        .toStream().to("out");
                break;
            }
            case "table_transform_values":
                b.<String, String>table("in", kv("store"))
                        .transformValues(() -> new org.apache.kafka.streams.kstream.ValueTransformerWithKey<String, String, String>() {
                            @Override
                            public void init(org.apache.kafka.streams.processor.ProcessorContext context) { }

                            @Override
                            public String transform(String key, String value) {
                                return value == null ? null : key + "=" + value;
                            }

                            @Override
                            public void close() { }
                        }).toStream().to("out");
                break;
            // ------------------------------------------------------------ stream aggregations
            case "count": {
                Materialized<String, Long, KeyValueStore<Bytes, byte[]>> store = Materialized.as("store");
                if (p != null && p.has("store_caching")) {
                    store = flag(p, "store_caching") ? store.withCachingEnabled() : store.withCachingDisabled();
                }
                b.<String, String>stream("in").flatMapValues(v -> v == null ? List.of("") : List.of(v.split(",")))
                        .groupByKey().count(store).toStream()
                        .to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            }
            case "count_plain":
                b.<String, String>stream("in").groupByKey().count(Materialized.as("store")).toStream()
                        .to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            case "reduce":
                b.<String, String>stream("in").groupByKey().reduce((a, v) -> a + "," + v, kv("store")).toStream().to("out");
                break;
            case "aggregate":
                b.<String, String>stream("in").groupByKey().aggregate(() -> "", (k, v, a) -> a + v, kv("store"))
                        .toStream().to("out");
                break;
            case "group_by_count":
                b.<String, String>stream("in").groupBy((k, v) -> v).count(Materialized.as("store")).toStream()
                        .to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            case "group_by_reduce":
                b.<String, String>stream("in").groupBy((k, v) -> v.substring(0, 1))
                        .reduce((a, v) -> a + "," + v, kv("store")).toStream().to("out");
                break;
            case "flat_map_count":
                b.<String, String>stream("in").flatMap((k, v) -> {
                    List<KeyValue<String, String>> result = new ArrayList<>();
                    for (String part : v.split(",")) {
                        result.add(KeyValue.pair(part, k));
                    }
                    return result;
                }).groupByKey().count(Materialized.as("store")).toStream()
                        .to("out", Produced.with(Serdes.String(), Serdes.Long()));
                outputs = out("out", "long");
                break;
            case "cogroup_repartition": {
                KGroupedStream<String, String> one = b.<String, String>stream("in").groupByKey();
                KGroupedStream<String, String> two = b.<String, String>stream("in2").groupBy((k, v) -> v.substring(0, 1));
                one.<String>cogroup((k, v, a) -> a + "L" + v).cogroup(two, (k, v, a) -> a + "R" + v)
                        .aggregate(() -> "", kv("store")).toStream().to("out");
                break;
            }
            case "cogroup": {
                KGroupedStream<String, String> one = b.<String, String>stream("in").groupByKey();
                KGroupedStream<String, String> two = b.<String, String>stream("in2").groupByKey();
                one.<String>cogroup((k, v, a) -> a + "L" + v).cogroup(two, (k, v, a) -> a + "R" + v)
                        .aggregate(() -> "", kv("store")).toStream().to("out");
                break;
            }
            // ------------------------------------------------------------ windows
            case "window_count":
            case "window_suppress":
            case "window_emit_final": {
                var windowedBy = b.<String, String>stream("in").groupByKey().windowedBy(timeWindows(p));
                if (family.equals("window_emit_final")) {
                    windowedBy = windowedBy.emitStrategy(EmitStrategy.onWindowClose());
                }
                Materialized<String, Long, WindowStore<Bytes, byte[]>> store =
                        Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("store").withKeySerde(Serdes.String()).withValueSerde(Serdes.Long());
                if (p.has("retention")) {
                    store = store.withRetention(Duration.ofMillis(num(p, "retention")));
                }
                KTable<Windowed<String>, Long> counts = windowedBy.count(store);
                if (family.equals("window_suppress")) {
                    counts = counts.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
                }
                windowedLongOut(counts);
                outputs = out("out", "long");
                break;
            }
            case "window_reduce":
                windowedOut(b.<String, String>stream("in").groupByKey().windowedBy(timeWindows(p))
                        .reduce((a, v) -> a + "," + v, Materialized.as("store")));
                break;
            case "window_aggregate":
                windowedOut(b.<String, String>stream("in").groupByKey().windowedBy(timeWindows(p))
                        .aggregate(() -> "", (k, v, a) -> a + v, Materialized.as("store")));
                break;
            case "sliding_count":
            case "sliding_suppress":
            case "sliding_emit_final": {
                var windowedBy = b.<String, String>stream("in").groupByKey().windowedBy(slidingWindows(p));
                if (family.equals("sliding_emit_final")) {
                    windowedBy = windowedBy.emitStrategy(EmitStrategy.onWindowClose());
                }
                KTable<Windowed<String>, Long> counts =
                        windowedBy.count(Materialized.<String, Long, WindowStore<Bytes, byte[]>>as("store").withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()));
                if (family.equals("sliding_suppress")) {
                    counts = counts.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
                }
                windowedLongOut(counts);
                outputs = out("out", "long");
                break;
            }
            case "sliding_reduce":
                windowedOut(b.<String, String>stream("in").groupByKey().windowedBy(slidingWindows(p))
                        .reduce((a, v) -> a + "," + v, Materialized.as("store")));
                break;
            case "sliding_aggregate":
                windowedOut(b.<String, String>stream("in").groupByKey().windowedBy(slidingWindows(p))
                        .aggregate(() -> "", (k, v, a) -> a + v, Materialized.as("store")));
                break;
            case "session_count":
            case "session_suppress":
            case "session_emit_final": {
                var windowedBy = b.<String, String>stream("in").groupByKey().windowedBy(sessionWindows(p));
                if (family.equals("session_emit_final")) {
                    windowedBy = windowedBy.emitStrategy(EmitStrategy.onWindowClose());
                }
                KTable<Windowed<String>, Long> counts =
                        windowedBy.count(Materialized.<String, Long, SessionStore<Bytes, byte[]>>as("store").withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()));
                if (family.equals("session_suppress")) {
                    counts = counts.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
                }
                windowedLongOut(counts);
                outputs = out("out", "long");
                break;
            }
            case "session_reduce":
                windowedOut(b.<String, String>stream("in").groupByKey().windowedBy(sessionWindows(p))
                        .reduce((a, v) -> a + "," + v, Materialized.as("store")));
                break;
            case "session_aggregate":
                windowedOut(b.<String, String>stream("in").groupByKey().windowedBy(sessionWindows(p))
                        .aggregate(() -> "", (k, v, a) -> a + v, (k, x, y) -> x + "|" + y,
                                Materialized.<String, String, SessionStore<Bytes, byte[]>>as("store")));
                break;
            case "cogroup_window": {
                KGroupedStream<String, String> one = b.<String, String>stream("in").groupByKey();
                KGroupedStream<String, String> two = b.<String, String>stream("in2").groupByKey();
                var cogrouped = one.<String>cogroup((k, v, a) -> a + "L" + v).cogroup(two, (k, v, a) -> a + "R" + v);
                String windows = str(p, "windows", "time");
                if (windows.equals("time")) {
                    windowedOut(cogrouped.windowedBy(timeWindows(p)).aggregate(() -> "",
                            Materialized.<String, String, WindowStore<Bytes, byte[]>>as("store")));
                } else if (windows.equals("sliding")) {
                    windowedOut(cogrouped.windowedBy(slidingWindows(p)).aggregate(() -> "",
                            Materialized.<String, String, WindowStore<Bytes, byte[]>>as("store")));
                } else {
                    windowedOut(cogrouped.windowedBy(sessionWindows(p)).aggregate(() -> "", (k, x, y) -> x + "|" + y,
                            Materialized.<String, String, SessionStore<Bytes, byte[]>>as("store")));
                }
                break;
            }
            // ------------------------------------------------------------ joins
            case "stream_join": {
                KStream<String, String> left = b.stream("left");
                KStream<String, String> right = b.stream("right");
                String kind = str(p, "kind", "inner");
                JoinWindows windows = joinWindows(p);
                KStream<String, String> joined = kind.equals("inner") ? left.join(right, JOIN, windows)
                        : kind.equals("left") ? left.leftJoin(right, JOIN, windows) : left.outerJoin(right, JOIN, windows);
                joined.to("out");
                break;
            }
            case "stream_join_rekeyed": {
                KStream<String, String> left = b.<String, String>stream("left").selectKey((k, v) -> v.substring(0, 1));
                KStream<String, String> right = b.<String, String>stream("right").selectKey((k, v) -> v.substring(0, 1));
                left.leftJoin(right, JOIN, joinWindows(p)).to("out");
                break;
            }
            case "stream_table_join_rekeyed": {
                KStream<String, String> left = b.<String, String>stream("left").selectKey((k, v) -> v.substring(0, 1));
                left.leftJoin(b.table("right", kv("right-store")), JOIN).to("out");
                break;
            }
            case "stream_self_join": {
                KStream<String, String> in = b.stream("in");
                in.join(in, JOIN, joinWindows(p)).to("out");
                break;
            }
            case "stream_table_join": {
                KStream<String, String> left = b.stream("left");
                KTable<String, String> right = p.has("grace")
                        ? b.table("right", Materialized.<String, String>as(Stores.persistentVersionedKeyValueStore(
                                "right-store", Duration.ofMillis(num(p, "history")))))
                        : b.table("right", kv("right-store"));
                boolean leftJoin = str(p, "kind", "inner").equals("left");
                if (p.has("grace")) {
                    var joined = org.apache.kafka.streams.kstream.Joined.<String, String, String>as("j")
                            .withGracePeriod(Duration.ofMillis(num(p, "grace")));
                    (leftJoin ? left.leftJoin(right, JOIN, joined) : left.join(right, JOIN, joined)).to("out");
                } else {
                    (leftJoin ? left.leftJoin(right, JOIN) : left.join(right, JOIN)).to("out");
                }
                break;
            }
            case "stream_global_join": {
                KStream<String, String> left = b.stream("left");
                GlobalKTable<String, String> right = b.globalTable("right", kv("right-store"));
                boolean leftJoin = str(p, "kind", "inner").equals("left");
                org.apache.kafka.streams.kstream.KeyValueMapper<String, String, String> mapper =
                        (k, v) -> v != null && v.contains(":") ? v.split(":")[0] : null;
                (leftJoin ? left.leftJoin(right, mapper, JOIN) : left.join(right, mapper, JOIN)).to("out");
                break;
            }
            case "fk_join": {
                KTable<String, String> left = b.table("left", kv("left-store"));
                KTable<String, String> right = b.table("right", kv("right-store"));
                java.util.function.Function<String, String> fk = v -> v.contains("|") ? v.split("\\|")[0] : null;
                boolean leftJoin = str(p, "kind", "inner").equals("left");
                (leftJoin ? left.leftJoin(right, fk, JOIN) : left.join(right, fk, JOIN)).toStream().to("out");
                break;
            }
            // ------------------------------------------------------------ punctuation
            case "punctuate_stream":
                b.<String, String>stream("in").process(() -> new Ticker(PunctuationType.STREAM_TIME, num(p, "interval")))
                        .to("out");
                break;
            case "punctuate_wall":
                b.<String, String>stream("in").process(() -> new Ticker(PunctuationType.WALL_CLOCK_TIME, num(p, "interval")))
                        .to("out");
                break;
            default:
                throw new IllegalArgumentException("unknown topology family " + family);
        }
        return new Spec(b.build(), outputs);
    }
}
