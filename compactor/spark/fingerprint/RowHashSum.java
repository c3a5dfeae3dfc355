package io.github.streamingcompactor.spark;

import org.apache.spark.sql.Column;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.util.AccumulatorV2;

/**
 * The rows a Spark job handed through one point of its plan, counted, and the sum of their
 * 64-bit hashes, wrapping at 2^64: a content fingerprint taken inside the stage's generated code.
 *
 * <p>Spark's {@code Observation} takes the same sums, but its operator is one Spark interprets
 * row by row outside the generated code, so it cuts a scan-and-write stage in two and every row
 * crosses twice (a quarter of a large merge's time). Here a filter that keeps every row calls
 * {@link Counter} from the generated code, and the sums travel back as an accumulator.
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
   * this sum. Nondeterministic, so that the optimizer neither moves nor drops it.
   */
  public Column counting(Column hash) {
    return functions.udf(new Counter(this), DataTypes.BooleanType).asNondeterministic().apply(hash);
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
    count(hash);
  }

  void count(long hash) {
    rows++;
    sum += hash;
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

  private static final class Counter implements UDF1<Long, Boolean> {
    private final RowHashSum sum;

    Counter(RowHashSum sum) {
      this.sum = sum;
    }

    @Override
    public Boolean call(Long hash) {
      sum.count(hash);
      return Boolean.TRUE;
    }
  }
}
