package io.sigflow.contract;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;

/**
 * Whether an event time (microseconds since the epoch) is at or behind the watermark by which
 * the running micro-batch's stateful operators drop rows as late, as Spark's own condition
 * compares it ({@code time <= watermark}, in microseconds).
 *
 * <p>That watermark is not in the stream's plan: the batch's driver puts it in a Spark local
 * property (its name given here) before the batch's plan runs, and every task of the batch's
 * jobs carries it. So the plan itself can tell its late rows as it reads them, with the same
 * code in every batch. Null when the task carries no such property (a plan run where no batch
 * set it, or a batch without a watermark yet): then the caller cannot tell, and must not
 * take the answer as "on time" (spark_jobs/jobs/late_rows.py).
 */
public final class AtOrBehindBatchWatermark implements UDF1<Long, Boolean> {
  private static final long serialVersionUID = 1L;

  private final String property;
  // a task's property, read once per task: each task runs its own deserialised copy
  private transient TaskContext readFor;
  private transient Long watermarkMicros;

  public AtOrBehindBatchWatermark(String property) {
    this.property = property;
  }

  /** This check as a Spark UDF; the overload chosen at compile time (FlatRecordParser.asUdf). */
  public UserDefinedFunction asUdf() {
    return functions.udf(this, DataTypes.BooleanType);
  }

  @Override
  public Boolean call(Long timeMicros) {
    TaskContext task = TaskContext.get();
    if (task == null || timeMicros == null) return null;
    if (task != readFor) {
      String text = task.getLocalProperty(property);
      watermarkMicros = text == null ? null : Math.multiplyExact(Long.parseLong(text), 1000L);
      readFor = task;
    }
    return watermarkMicros == null ? null : timeMicros <= watermarkMicros;
  }
}
