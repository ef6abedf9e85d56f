package io.sigflow.contract;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;

/**
 * A contract's common case in one JSON parse: a flat object whose required fields have their
 * JSON types and whose other fields are strings, integers or booleans.
 *
 * <p>Its row is (accepted, each string field, each number field, each time field's text and
 * epoch milliseconds, the other fields' texts). It accepts a record only where the contract's
 * checks in Spark (spark_jobs/contracts/events.py) give the same values; every record it
 * refuses goes to those checks, which also give the reason. So it refuses whatever it cannot
 * be sure of: a nested value or null, a duplicate key, a lone surrogate, an integer beyond a
 * long, a number with an exponent or more digits than a double holds exactly, a negative
 * zero, broken JSON, text after the object. What a time's text means and whether a time is
 * in range of the record's Kafka timestamp stays with Spark.
 */
public final class FlatRecordParser implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  private static final int STRING = 0;
  private static final int NUMBER = 1;
  private static final int TIME = 2;
  // Integers and decimals of up to 15 digits are exact in a double, so Spark's decimal and
  // Java's double parse give the same double for them.
  private static final int MAX_EXACT_DIGITS = 15;

  private final HashMap<String, Integer> slots = new HashMap<>();
  private final int[] kinds;
  private final int[] columns;
  private final Set<String>[] allowed;
  private final int width;
  private final int maxBytes;
  private final long epochMsMin;
  private final long epochMsMax;
  private transient JsonFactory factory;
  private transient Row refused;

  @SuppressWarnings("unchecked")
  public FlatRecordParser(List<String> strings, List<String> numbers, List<String> times,
      Map<String, List<String>> choices, int maxBytes, long epochMsMin, long epochMsMax) {
    int fields = strings.size() + numbers.size() + times.size();
    if (fields > 31) throw new IllegalArgumentException("at most 31 required fields");
    kinds = new int[fields];
    columns = new int[fields];
    allowed = new Set[fields];
    int slot = 0;
    int column = 1;
    for (String field : strings) {
      allowed[slot] = choices.containsKey(field) ? Set.copyOf(choices.get(field)) : null;
      column = place(field, slot++, STRING, column, 1);
    }
    for (String field : numbers) column = place(field, slot++, NUMBER, column, 1);
    for (String field : times) column = place(field, slot++, TIME, column, 2);
    width = column + 1;
    this.maxBytes = maxBytes;
    this.epochMsMin = epochMsMin;
    this.epochMsMax = epochMsMax;
  }

  /**
   * This parser as a Spark UDF returning {@code rowType}. The overload is chosen here, at
   * compile time: chosen by reflection (py4j), {@code functions.udf} resolved to the untyped
   * Scala one, which Spark refuses, whenever the JVM listed its methods in another order (a
   * class archive trained with this class loaded did).
   */
  public UserDefinedFunction asUdf(DataType rowType) {
    return functions.udf(this, rowType);
  }

  private int place(String field, int slot, int kind, int column, int span) {
    slots.put(field, slot);
    kinds[slot] = kind;
    columns[slot] = column;
    return column + span;
  }

  @Override
  public Row call(byte[] value) {
    if (value == null || value.length > maxBytes) return refused();
    // decoded as Spark casts the bytes to a string before its own parse
    String text = new String(value, StandardCharsets.UTF_8);
    int start = 0;
    while (start < text.length() && " \t\r\n".indexOf(text.charAt(start)) >= 0) start++;
    if (start == text.length() || text.charAt(start) != '{') return refused();
    boolean escapes = text.indexOf('\\') >= 0; // a lone surrogate can only come from an escape
    Object[] out = new Object[width];
    HashMap<String, String> extras = new HashMap<>();
    int seen = 0;
    try (JsonParser parser = factory().createParser(text)) {
      parser.nextToken();
      JsonToken current;
      while ((current = parser.nextToken()) == JsonToken.FIELD_NAME) {
        String name = parser.currentName();
        current = parser.nextToken();
        if (escapes && hasLoneSurrogate(name)) return refused();
        Integer slot = slots.get(name);
        if (slot == null) {
          String extra = extraText(parser, current, escapes);
          if (extra == null || extras.put(name, extra) != null) return refused();
          continue;
        }
        if ((seen & (1 << slot)) != 0) return refused();
        seen |= 1 << slot;
        Object typed = typed(parser, current, slot, escapes);
        if (typed == null) return refused();
        out[columns[slot] + (typed instanceof Long ? 1 : 0)] = typed;
      }
      if (current != JsonToken.END_OBJECT || seen != (1 << kinds.length) - 1 || parser.nextToken() != null) {
        return refused();
      }
    } catch (IOException | RuntimeException notFlatJson) {
      return refused();
    }
    out[0] = true;
    out[width - 1] = extras;
    return RowFactory.create(out);
  }

  /** A required field's value (a time's epoch milliseconds as a Long), or null to refuse. */
  private Object typed(JsonParser parser, JsonToken current, int slot, boolean escapes) throws IOException {
    switch (kinds[slot]) {
      case STRING: {
        String text = text(parser, current, escapes);
        return text == null || allowed[slot] == null || allowed[slot].contains(text) ? text : null;
      }
      case NUMBER:
        return exactDouble(parser, current);
      default: {
        if (current == JsonToken.VALUE_STRING) return text(parser, current, escapes);
        Long ms = exactLong(parser, current);
        return ms != null && ms >= epochMsMin && ms <= epochMsMax ? ms : null;
      }
    }
  }

  private static String text(JsonParser parser, JsonToken current, boolean escapes) throws IOException {
    if (current != JsonToken.VALUE_STRING) return null;
    String text = parser.getText();
    return escapes && hasLoneSurrogate(text) ? null : text;
  }

  /** An other field's text as Spark casts it to a string, or null to refuse. */
  private static String extraText(JsonParser parser, JsonToken current, boolean escapes) throws IOException {
    switch (current) {
      case VALUE_STRING:
        return text(parser, current, escapes);
      case VALUE_NUMBER_INT: {
        Long number = exactLong(parser, current);
        return number == null ? null : number.toString();
      }
      case VALUE_TRUE:
        return "true";
      case VALUE_FALSE:
        return "false";
      default:
        return null;
    }
  }

  private static Long exactLong(JsonParser parser, JsonToken current) throws IOException {
    if (current != JsonToken.VALUE_NUMBER_INT || parser.getNumberType() == JsonParser.NumberType.BIG_INTEGER) {
      return null;
    }
    return parser.getLongValue();
  }

  private static Double exactDouble(JsonParser parser, JsonToken current) throws IOException {
    Long integer = exactLong(parser, current);
    if (integer != null) return integer.doubleValue();
    if (current != JsonToken.VALUE_NUMBER_FLOAT) return null;
    String text = parser.getText();
    int digits = 0;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c >= '0' && c <= '9') {
        digits++;
      } else if (c == 'e' || c == 'E') {
        return null;
      }
    }
    double number = parser.getDoubleValue();
    return digits > MAX_EXACT_DIGITS || (number == 0.0 && text.charAt(0) == '-') ? null : number;
  }

  private static boolean hasLoneSurrogate(String text) {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (Character.isHighSurrogate(c) && i + 1 < text.length() && Character.isLowSurrogate(text.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        return true;
      }
    }
    return false;
  }

  private JsonFactory factory() {
    if (factory == null) factory = new JsonFactory();
    return factory;
  }

  private Row refused() {
    if (refused == null) {
      Object[] out = new Object[width];
      out[0] = false;
      refused = RowFactory.create(out);
    }
    return refused;
  }
}
