// A Java peer for kappaflow's registry serdes (tests/registry/test_registry_topology.py runs it through
// tests/harness/java_registry_peer.py): it writes Avro records with a Java Kafka serializer for Python to
// read, and reads the topics Python wrote.
//
// write: Apicurio's AvroKafkaSerializer (from Maven Central) in its Confluent-compatible mode (the schema
// id, the registry's content id, in a 4-byte prefix after magic byte 0; no headers) produces the records.
//
// Confluent's Java serializers (io.confluent:*) are not on Maven Central, so this reader checks with what
// is. Kafka's own consumer reads the records. Every framed key and value is decoded by hand as Confluent's
// deserializers do (magic byte 0, 4-byte big-endian schema id, and for Protobuf the zigzag-varint message
// indexes), with the writer schema fetched by id from the registry's Confluent-compatible REST API and the
// payload decoded by Apache Avro's GenericDatumReader or protobuf-java's DynamicMessage; the decoded record
// is re-encoded with the Java library and compared with the bytes Python wrote ("reencoded_equal": the
// encodings are byte-identical, not merely readable). Avro keys and values are also decoded by a real
// Kafka Deserializer from Maven Central, Apicurio's AvroKafkaDeserializer in its Confluent-compatible mode
// (4-byte ids, no headers), reported as "apicurio_record". Its Protobuf deserializer cannot take part:
// it parses a registered schema as .proto text or raw descriptor bytes, not the base64 descriptor
// confluent-kafka-python registers (and Confluent's server accepts).
//
// read: everything below.
//
// Usage: RegistryJavaPeer read <bootstrap> <registry-url> <topic> <expected-count> <timeout-seconds>
//          prints one JSON object per record on stdout
//        RegistryJavaPeer write <bootstrap> <registry-url> <topic> <avro-schema> (<key> <avro-json>)...

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.CodedInputStream;
import com.google.protobuf.DescriptorProtos;
import com.google.protobuf.Descriptors;
import com.google.protobuf.DynamicMessage;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class RegistryJavaPeer {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final HttpClient HTTP = HttpClient.newHttpClient();
  private static final Map<Integer, JsonNode> SCHEMAS = new HashMap<>();
  private static final AvroKafkaDeserializer<Object> APICURIO_KEYS = new AvroKafkaDeserializer<>();
  private static final AvroKafkaDeserializer<Object> APICURIO_VALUES = new AvroKafkaDeserializer<>();

  private RegistryJavaPeer() {}

  public static void main(String[] args) throws Exception {
    if (args[0].equals("write")) {
      write(args[1], args[2], args[3], args[4], Arrays.copyOfRange(args, 5, args.length));
    } else {
      read(args[1], args[2], args[3], Integer.parseInt(args[4]), Long.parseLong(args[5]));
    }
  }

  /** Apicurio's serde settings for Confluent's wire format against the registry's own v3 API. */
  private static Map<String, Object> apicurioConfluentMode(String registry) {
    Map<String, Object> apicurio = new HashMap<>();
    apicurio.put("apicurio.registry.url", registry.replace("/apis/ccompat/v7", "/apis/registry/v3"));
    apicurio.put("apicurio.registry.use-id", "contentId");  // the ids the Confluent API hands out
    apicurio.put("apicurio.registry.headers.enabled", "false");  // the id is in the payload
    apicurio.put("apicurio.registry.auto-register", "true");
    return apicurio;
  }

  private static void write(String bootstrap, String registry, String topic, String schemaText, String[] records)
      throws Exception {
    Schema schema = new Schema.Parser().parse(schemaText);
    GenericDatumReader<Object> reader = new GenericDatumReader<>(schema);
    AvroKafkaSerializer<Object> values = new AvroKafkaSerializer<>();
    values.configure(apicurioConfluentMode(registry), false);
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("acks", "all");
    try (KafkaProducer<String, Object> producer = new KafkaProducer<>(props, new StringSerializer(), values)) {
      for (int i = 0; i + 1 < records.length; i += 2) {
        Object value = reader.read(null, DecoderFactory.get().jsonDecoder(schema, records[i + 1]));
        producer.send(new ProducerRecord<>(topic, records[i], value)).get();
      }
    }
  }

  private static void read(String bootstrap, String registry, String topic, int expected, long timeoutSeconds)
      throws Exception {
    long deadline = System.currentTimeMillis() + timeoutSeconds * 1000L;
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("key.deserializer", ByteArrayDeserializer.class.getName());
    props.put("value.deserializer", ByteArrayDeserializer.class.getName());
    props.put("isolation.level", "read_committed");
    Map<String, Object> apicurio = apicurioConfluentMode(registry);
    APICURIO_KEYS.configure(apicurio, true);
    APICURIO_VALUES.configure(apicurio, false);
    int seen = 0;
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
      List<TopicPartition> partitions = new ArrayList<>();
      for (PartitionInfo info : consumer.partitionsFor(topic)) {
        partitions.add(new TopicPartition(topic, info.partition()));
      }
      consumer.assign(partitions);
      consumer.seekToBeginning(partitions);
      while (seen < expected && System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
          ObjectNode out = JSON.createObjectNode();
          out.put("partition", record.partition());
          out.put("offset", record.offset());
          out.set("key", decode(registry, topic, record.key(), APICURIO_KEYS));
          out.set("value", decode(registry, topic, record.value(), APICURIO_VALUES));
          System.out.println(JSON.writeValueAsString(out));
          seen++;
        }
      }
    }
    System.out.flush();
    if (seen < expected) {
      System.err.println("read " + seen + " of " + expected + " records from " + topic);
      System.exit(2);
    }
  }

  /** A framed key or value decoded by its writer schema; an unframed one as a UTF-8 string. */
  private static JsonNode decode(String registry, String topic, byte[] data, AvroKafkaDeserializer<Object> apicurio)
      throws Exception {
    if (data == null) {
      return JSON.nullNode();
    }
    if (data.length < 5 || data[0] != 0) {
      return JSON.getNodeFactory().textNode(new String(data, StandardCharsets.UTF_8));
    }
    int id = ByteBuffer.wrap(data, 1, 4).getInt();
    JsonNode schema = schemaById(registry, id);
    String type = schema.path("schemaType").asText("AVRO");
    ObjectNode out = JSON.createObjectNode();
    out.put("schema_id", id);
    out.put("schema_type", type);
    if (type.equals("AVRO")) {
      Schema avro = new Schema.Parser().parse(schema.get("schema").asText());
      GenericDatumReader<Object> reader = new GenericDatumReader<>(avro);
      Object value = reader.read(null, DecoderFactory.get().binaryDecoder(data, 5, data.length - 5, null));
      ByteArrayOutputStream again = new ByteArrayOutputStream();
      BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(again, null);
      new GenericDatumWriter<Object>(avro).write(value, encoder);
      encoder.flush();
      out.put("record_name", avro.getFullName());
      out.set("record", avroJson(avro, value));
      out.set("apicurio_record", avroJson(avro, apicurio.deserialize(topic, data)));
      out.put("reencoded_equal", Arrays.equals(again.toByteArray(), Arrays.copyOfRange(data, 5, data.length)));
    } else if (type.equals("PROTOBUF")) {
      byte[] fileBytes = Base64.getDecoder().decode(schema.get("schema").asText());
      Descriptors.FileDescriptor file = Descriptors.FileDescriptor.buildFrom(
          DescriptorProtos.FileDescriptorProto.parseFrom(fileBytes), new Descriptors.FileDescriptor[0]);
      CodedInputStream in = CodedInputStream.newInstance(data, 5, data.length - 5);
      int count = in.readSInt32();
      List<Descriptors.Descriptor> level = file.getMessageTypes();
      Descriptors.Descriptor descriptor = level.get(0);  // count 0 is the shorthand for [0]
      for (int i = 0; i < count; i++) {
        descriptor = level.get(in.readSInt32());
        level = descriptor.getNestedTypes();
      }
      int start = 5 + in.getTotalBytesRead();
      byte[] payload = Arrays.copyOfRange(data, start, data.length);
      DynamicMessage message = DynamicMessage.parseFrom(descriptor, payload);
      ObjectNode fields = JSON.createObjectNode();
      for (Map.Entry<Descriptors.FieldDescriptor, Object> field : message.getAllFields().entrySet()) {
        fields.set(field.getKey().getName(), JSON.valueToTree(field.getValue()));
      }
      out.put("record_name", descriptor.getFullName());
      out.set("record", fields);
      out.put("reencoded_equal", Arrays.equals(message.toByteArray(), payload));
    } else {
      throw new IllegalStateException("schema " + id + " has type " + type + ", not AVRO or PROTOBUF");
    }
    return out;
  }

  private static JsonNode avroJson(Schema schema, Object value) throws Exception {
    return schema.getType() == Schema.Type.RECORD
        ? JSON.readTree(value.toString())
        : JSON.valueToTree(value instanceof CharSequence ? value.toString() : value);
  }

  private static JsonNode schemaById(String registry, int id) throws Exception {
    JsonNode cached = SCHEMAS.get(id);
    if (cached != null) {
      return cached;
    }
    HttpRequest request = HttpRequest.newBuilder(URI.create(registry + "/schemas/ids/" + id)).build();
    HttpResponse<String> response = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
    if (response.statusCode() != 200) {
      throw new IllegalStateException("registry answered " + response.statusCode() + " for schema id " + id);
    }
    JsonNode schema = JSON.readTree(response.body());
    SCHEMAS.put(id, schema);
    return schema;
  }
}
