package io.sigflow.contract;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * Whether a record's time is surely after an instant, read without parsing the record: true
 * only when the JSON object's first top-level {@code field} is a UTC ISO-8601 text ("Z") whose
 * second is after the instant's. Whatever else (another form, a number, no such field, broken
 * JSON) gives false, and the record is left to the contract's checks.
 *
 * <p>Sound for a filter that skips the records it is true for: a record that is a valid event
 * has exactly one such field, whose text Spark reads as that UTC instant, and a text of the
 * form {@code yyyy-MM-ddTHH:mm:ss} orders as its instant's second does. A record whose field
 * appears twice is no valid event at all, so the first one decides. It reads the record only
 * up to the field and builds no value but the time's text (spark_jobs/contracts/events.py).
 */
public final class TimeSurelyAfter implements UDF1<byte[], Boolean> {
  private static final long serialVersionUID = 1L;
  private static final int SECOND = "yyyy-MM-ddTHH:mm:ss".length();
  private static final DateTimeFormatter TO_THE_SECOND =
      DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss").withZone(ZoneOffset.UTC);

  private final String field;
  private final String instantSecond;
  private transient JsonFactory factory;

  public TimeSurelyAfter(String field, long epochMs) {
    this.field = field;
    this.instantSecond = TO_THE_SECOND.format(Instant.ofEpochMilli(epochMs));
    if (instantSecond.length() != SECOND) throw new IllegalArgumentException("not a year of four digits: " + epochMs);
  }

  /** This check as a Spark UDF; the overload chosen at compile time (FlatRecordParser.asUdf). */
  public UserDefinedFunction asUdf() {
    return functions.udf(this, DataTypes.BooleanType);
  }

  @Override
  public Boolean call(byte[] value) {
    if (value == null) return false;
    // decoded as Spark casts the bytes to a string before its own parse
    String text = new String(value, StandardCharsets.UTF_8);
    try (JsonParser parser = factory().createParser(text)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) return false;
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        boolean wanted = field.equals(parser.currentName());
        JsonToken current = parser.nextToken();
        if (wanted) return current == JsonToken.VALUE_STRING && after(parser.getText());
        parser.skipChildren();
      }
      return false;
    } catch (IOException | RuntimeException notJson) {
      return false;
    }
  }

  private boolean after(String time) {
    if (!utcToTheSecond(time)) return false;
    return time.substring(0, SECOND).compareTo(instantSecond) > 0;
  }

  /** yyyy-MM-ddTHH:mm:ss, then Z or a fraction of 1 to 9 digits and Z, every digit ASCII. */
  static boolean utcToTheSecond(String time) {
    int length = time.length();
    if (length < SECOND + 1 || time.charAt(length - 1) != 'Z') return false;
    for (int i = 0; i < SECOND; i++) {
      char c = time.charAt(i);
      char expected = "dddd-dd-ddTdd:dd:dd".charAt(i);
      if (expected == 'd' ? (c < '0' || c > '9') : c != expected) return false;
    }
    if (length == SECOND + 1) return true;
    if (time.charAt(SECOND) != '.' || length - SECOND - 2 < 1 || length - SECOND - 2 > 9) return false;
    for (int i = SECOND + 1; i < length - 1; i++) {
      char c = time.charAt(i);
      if (c < '0' || c > '9') return false;
    }
    return true;
  }

  private JsonFactory factory() {
    if (factory == null) factory = new JsonFactory();
    return factory;
  }
}
