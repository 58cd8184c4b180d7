import java.time.Duration;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.streams.KafkaStreams;

/**
 * What the counting peers (WordCountPeer, ScalingPeer) share: waiting for a started application's one
 * stream thread to process a number of records, timed from the first one the topology saw, the way the
 * Python benches time kappaflow (first record processed to the last one counted).
 */
final class PeerRun {
    private PeerRun() {
    }

    /** The thread-level "process-total": records processed by every task of the one stream thread. */
    static Metric processTotal(KafkaStreams streams) {
        for (Map.Entry<MetricName, ? extends Metric> entry : streams.metrics().entrySet()) {
            MetricName name = entry.getKey();
            if (name.name().equals("process-total") && name.group().equals("stream-thread-metrics")) {
                return entry.getValue();
            }
        }
        return null;
    }

    /**
     * Start {@code streams}, wait for {@code expected} processed records, print "{@code label} x" with x
     * = {@code units} per second on stdout, close, and exit 0; exit 2 when the wait fails.
     */
    static void timeAndExit(
            KafkaStreams streams, long expected, AtomicLong firstProcessed, Duration timeout, String label,
            long units) throws InterruptedException {
        streams.start();
        int status = 2;
        try {
            double seconds = awaitProcessed(streams, expected, firstProcessed, timeout);
            if (!Double.isNaN(seconds)) {
                System.out.printf(Locale.ROOT, "%s %.1f%n", label, units / seconds);
                System.out.flush();
                status = 0;
            }
        } finally {
            streams.close(Duration.ofSeconds(30));
        }
        System.exit(status);
    }

    /**
     * Seconds from {@code firstProcessed} (System.nanoTime, set by the topology on its first record) to the
     * moment the thread has processed {@code expected} records; NaN, with the reason on stderr, when the
     * application fails or the count is not reached within {@code timeout}.
     */
    static double awaitProcessed(KafkaStreams streams, long expected, AtomicLong firstProcessed, Duration timeout)
            throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        Metric processed = null;
        while (System.nanoTime() < deadline) {
            if (streams.state() == KafkaStreams.State.ERROR) {
                System.err.println("Kafka Streams went to ERROR");
                return Double.NaN;
            }
            if (processed == null) {
                processed = processTotal(streams);
            }
            if (processed != null && ((Number) processed.metricValue()).doubleValue() >= expected) {
                return (System.nanoTime() - firstProcessed.get()) / 1e9;
            }
            Thread.sleep(5);
        }
        System.err.println("did not process " + expected + " records in time");
        return Double.NaN;
    }
}
