package io.github.streamingcompactor.spark;

import java.util.List;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.objects.Invoke;
import org.apache.spark.sql.classic.ExpressionUtils;
import org.apache.spark.sql.types.AbstractDataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.ObjectType;
import org.apache.spark.util.AccumulatorV2;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The rows a Spark job handed through one point of its plan, counted, and the sum of their
 * 64-bit hashes, wrapping at 2^64: a content fingerprint taken inside the stage's generated code.
 *
 * <p>Spark's {@code Observation} takes the same sums, but its operator is one Spark interprets
 * row by row outside the generated code, so it cuts a scan-and-write stage in two and every row
 * crosses twice (a quarter of a large merge's time); a Java UDF still cost a sixth (its call
 * boxes the hash and goes through Spark's converters). Here a filter that keeps every row calls
 * {@link #counted} from the generated code (Spark's {@code Invoke} on this object, with the hash
 * as a primitive long), and the sums travel back as an accumulator.
 *
 * <p>Spark applies a task's accumulator update once for a task of a result stage; a re-executed
 * map stage can add its rows twice. A certificate then fails to hold and the merge is refused,
 * never wrongly committed.
 */
public final class RowHashSum extends AccumulatorV2<Long, String> {
  private long rows;
  private long sum;

  /**
   * A filter's condition that keeps every row and counts its {@code hash} (a non-null long) into
   * this sum, in the stage's generated code.
   */
  public Column counting(Column hash) {
    Expression counted =
        new Invoke(
            Literal.create(this, new ObjectType(RowHashSum.class)),
            "counted",
            DataTypes.BooleanType,
            CollectionConverters.asScala(List.of(ExpressionUtils.expression(hash))).toSeq(),
            CollectionConverters.asScala(List.<AbstractDataType>of(DataTypes.LongType)).toSeq(),
            false, // propagateNull: a hash is never null
            false, // returnNullable
            false); // isDeterministic: the optimizer neither moves, merges nor drops the filter
    return ExpressionUtils.column(counted);
  }

  /** The rows counted. */
  public long rows() {
    return rows;
  }

  /** Their hashes' sum, modulo 2^64. */
  public long sum() {
    return sum;
  }

  @Override
  public boolean isZero() {
    return rows == 0 && sum == 0;
  }

  @Override
  public AccumulatorV2<Long, String> copy() {
    RowHashSum copy = new RowHashSum();
    copy.rows = rows;
    copy.sum = sum;
    return copy;
  }

  @Override
  public void reset() {
    rows = 0;
    sum = 0;
  }

  @Override
  public void add(Long hash) {
    counted(hash);
  }

  @Override
  public void merge(AccumulatorV2<Long, String> other) {
    RowHashSum that = (RowHashSum) other;
    rows += that.rows;
    sum += that.sum;
  }

  @Override
  public String value() {
    return rows + " rows, " + Long.toUnsignedString(sum, 16);
  }

  /** Called from the generated code for every row: counts it and keeps it. */
  public boolean counted(long hash) {
    rows++;
    sum += hash;
    return true;
  }
}
