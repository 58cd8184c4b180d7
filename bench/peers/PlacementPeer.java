import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * bench/placement.py's Java Kafka Streams peer: one instance (a "pod") of the count per key that
 * {@code tests.kafka.apps:keycount} is in kappaflow, run as its own JVM so the bench can kill -9 it,
 * SIGTERM it and start it again on the same state directory, exactly as it does the {@code kappaflow run}
 * processes.
 *
 * <p>Same topology (String keys and values in, the count per key as a big-endian Long out, one store
 * "counts" with its changelog) and the same configuration as the kappaflow side: exactly_once_v2, one
 * standby, one stream thread, static membership ({@code group.instance.id} = the pod's name), 6 s
 * sessions with 500 ms heartbeats, the default commit interval (100 ms under exactly-once) and the
 * high-availability task assignor with its defaults ({@code acceptable.recovery.lag} 10000,
 * {@code max.warmup.replicas} 2, {@code probing.rebalance.interval.ms} 10 min), none of them set here.
 *
 * <p>Why a tiny HTTP endpoint instead of JMX: the bench reads kappaflow's readiness and restored-record
 * counter over HTTP; answering the same two questions the same way keeps one code path in Python and no
 * JMX client. {@code GET /health/ready} is 200 while the client is RUNNING (503 otherwise, as kappaflow's),
 * {@code GET /metrics} prints {@code java_restored_records_total n}: the changelog records restored into
 * active tasks' stores, summed by a global {@link StateRestoreListener} (which, like kappaflow's counter,
 * does not see standby updates). SIGTERM closes the client the way a Java user's shutdown hook does:
 * {@code close()} with its default options, which keeps a static member in the group.
 *
 * <p>Args: bootstrap applicationId source sink stateDir instanceId httpPort.
 */
public final class PlacementPeer {
    private PlacementPeer() {
    }

    public static void main(String[] args) throws IOException, InterruptedException {
        if (args.length != 7) {
            System.err.println("usage: PlacementPeer bootstrap appId source sink stateDir instanceId httpPort");
            System.exit(64);
        }
        Properties props = new Properties();
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, args[1]);
        props.put(StreamsConfig.STATE_DIR_CONFIG, args[4]);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, 1);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG), args[5]);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 500);

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[2], Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                        .withKeySerde(Serdes.String())
                        .withValueSerde(Serdes.Long()))
                .toStream()
                .to(args[3], Produced.with(Serdes.String(), Serdes.Long()));

        AtomicLong restored = new AtomicLong();
        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        streams.setGlobalStateRestoreListener(new StateRestoreListener() {
            @Override
            public void onRestoreStart(TopicPartition tp, String store, long start, long end) {
                System.out.println("RESTORE_START " + tp + " " + start + ".." + end);
            }

            @Override
            public void onBatchRestored(TopicPartition tp, String store, long batchEnd, long count) {
                restored.addAndGet(count);
            }

            @Override
            public void onRestoreEnd(TopicPartition tp, String store, long total) {
                System.out.println("RESTORE_END " + tp + " " + total);
            }
        });
        streams.setStateListener((now, before) -> System.out.println("STATE " + before + " -> " + now));

        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", Integer.parseInt(args[6])), 0);
        server.createContext("/health/ready", exchange -> {
            boolean running = streams.state() == KafkaStreams.State.RUNNING;
            reply(exchange, running ? 200 : 503, running ? "ready\n" : streams.state() + "\n");
        });
        server.createContext("/metrics", exchange ->
                reply(exchange, 200, "java_restored_records_total " + restored.get() + "\n"));

        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(60));
            server.stop(0);
            closed.countDown();
        }));
        streams.start();
        server.start();
        closed.await();
    }

    private static void reply(HttpExchange exchange, int status, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        exchange.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }
}
