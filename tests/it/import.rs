//! `hvtrain data import` against what pandas and numpy (Debian's `python3-pandas`,
//! `python3-numpy`, `python3-h5py`) read from the same inputs:
//!
//! - CSV with a header, quoted fields, CRLF line ends and a string label column in the middle:
//!   x equal to `pandas.read_csv(...)`'s float32 features, y to a `pandas.Categorical`'s codes
//!   (names sorted), the names in `y_classes`; 70,000 rows, so more than one 65,536-row chunk;
//!   `--class-order appearance` gives `pandas.factorize`'s codes;
//! - gzipped TSV with two numeric targets: y float32 [N, 2], gzip-compressed output, its
//!   chunks no longer than its 500 rows;
//! - `--shard 3`: three files of balanced contiguous rows that concatenate to the whole, read by
//!   a training job through their `{rank}` path;
//! - `.npy` with `--y-file` (int64 labels, float64 features) and a compressed `.npz`;
//! - bad input: a missing field names the file, line and column (and `--fill` fills it), a
//!   text feature, a string label after integer ones, no `--y` (the columns listed).
//! - `--sample-weight`: a CSV column (split with the rows over `--shard`), a `.npz` array, a
//!   `.npy` file and a Parquet column into `w`, equal to what pandas/numpy read, the features
//!   without it; a job reads it with `data.sample_weight = "w"`; a negative, missing or
//!   non-numeric weight names the line (row) and column.

use crate::common;
use common::*;
use std::path::Path;

fn import(dir: &Path, args: &[&str]) -> Run {
    let mut a = vec!["data", "import"];
    a.extend_from_slice(args);
    hvtrain(&a, dir, 120)
}

#[test]
fn csv_and_tsv_match_pandas() {
    let dir = scratch("import-csv");
    python(
        &dir,
        r#"
import numpy as np, pandas as pd
rng = np.random.default_rng(5)
n = 70000
df = pd.DataFrame({"a": rng.normal(size=n).astype(np.float32), "b c": rng.integers(0, 100, n)})
df["kind"] = np.array(["gamma", "alpha", "beta, with comma"])[rng.integers(0, 3, n)]
df["d"] = rng.random(n).astype(np.float32)
df.to_csv("t.csv", index=False, lineterminator="\r\n", float_format="%.9g")
r = pd.DataFrame({"t1": rng.normal(size=500), "x1": rng.normal(size=500), "t2": rng.normal(size=500), "x2": rng.normal(size=500)})
r.to_csv("r.tsv.gz", sep="\t", index=False, float_format="%.17g")
"#,
    );
    let run = import(&dir, &["t.csv", "t.h5", "--y", "kind"]);
    assert!(run.ok(), "{}", run.all());
    assert!(run.stderr.contains("wrote x float32 [70000, 3], y int32 [N] classes"), "{}", run.all());
    let check = python(
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
df = pd.read_csv("t.csv")
cat = pd.Categorical(df["kind"])  # names sorted, as LabelEncoder numbers them
codes, names = cat.codes, cat.categories
f = h5py.File("t.h5")
x = df.drop(columns=["kind"]).to_numpy(np.float32)
assert f["x"].dtype == np.float32 and f["y"].dtype == np.int32
assert np.array_equal(f["x"][...], x), "x differs from pandas"
assert np.array_equal(f["y"][...], codes), "y differs from pandas.Categorical's codes"
assert [s.decode() for s in f["y_classes"][...]] == list(names), "class names"
assert [s.decode() for s in f["x_columns"][...]] == ["a", "b c", "d"]
print("ok", f["x"].chunks is not None)
"#,
    );
    assert_eq!(check.trim(), "ok True");
    // In order of first appearance on request: pandas.factorize's numbering.
    let run = import(&dir, &["t.csv", "ta.h5", "--y", "kind", "--class-order", "appearance"]);
    assert!(run.ok(), "{}", run.all());
    let check = python(
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
codes, names = pd.factorize(pd.read_csv("t.csv")["kind"])
f = h5py.File("ta.h5")
assert np.array_equal(f["y"][...], codes), "y differs from pandas.factorize"
assert [s.decode() for s in f["y_classes"][...]] == list(names), "class names"
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");

    let run = import(&dir, &["r.tsv.gz", "r.h5", "--y", "t1", "--y", "t2", "--compress", "gzip"]);
    assert!(run.ok(), "{}", run.all());
    let check = python(
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
df = pd.read_csv("r.tsv.gz", sep="\t")
f = h5py.File("r.h5")
assert f["x"].compression == "gzip"
assert f["x"].chunks[0] == 500, f["x"].chunks  # no chunk larger than the file (HDF5 stores whole chunks)
assert np.array_equal(f["y"][...], df[["t1", "t2"]].to_numpy(np.float32)), "targets"
assert np.array_equal(f["x"][...], df[["x1", "x2"]].to_numpy(np.float32)), "features"
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");
}

#[test]
fn shards_concatenate_and_train() {
    let _g = mpi_lock();
    let dir = scratch("import-shard");
    python(
        &dir,
        r#"
import numpy as np
rng = np.random.default_rng(2)
np.save("x.npy", rng.normal(size=(301, 4)))
np.save("y.npy", rng.integers(0, 3, 301))
np.savez_compressed("z.npz", x=rng.random((50, 3), dtype=np.float32), y=rng.normal(size=50))
"#,
    );
    let run = import(&dir, &["x.npy", "s-{rank}.h5", "--y-file", "y.npy", "--shard", "3"]);
    assert!(run.ok(), "{}", run.all());
    assert!(run.stderr.contains("train = \"s-{rank}.h5\""), "{}", run.all());
    let check = python(
        &dir,
        r#"
import numpy as np, h5py
fs = [h5py.File(f"s-{i}.h5") for i in range(3)]
assert [f["x"].shape[0] for f in fs] == [100, 100, 101], [f["x"].shape for f in fs]
assert np.array_equal(np.concatenate([f["x"][...] for f in fs]), np.load("x.npy").astype(np.float32))
assert np.array_equal(np.concatenate([f["y"][...] for f in fs]), np.load("y.npy"))
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");
    job(&dir, &[4, 8, 3], "s-{rank}.h5", None, "");
    let run = mpirun(1, &["train", "job.toml", "--set", "training.epochs=1"], &dir, 60);
    assert!(run.ok() && run.stderr.contains("301 of the 301 training samples"), "{}", run.all());

    let run = import(&dir, &["z.npz", "z.h5"]);
    assert!(run.ok(), "{}", run.all());
    assert!(run.stderr.contains("y float32 [N, 1] targets"), "{}", run.all());
    let check = python(
        &dir,
        r#"
import numpy as np, h5py
z, f = np.load("z.npz"), h5py.File("z.h5")
assert np.array_equal(f["x"][...], z["x"]) and np.array_equal(f["y"][...][:, 0], z["y"].astype(np.float32))
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");
}

#[test]
fn bad_input_names_the_line_and_column() {
    let dir = scratch("import-bad");
    std::fs::write(dir.join("m.csv"), "u,v,label\n1,2,0\n3,,1\n5,6,1\n").unwrap();
    let run = import(&dir, &["m.csv", "m.h5", "--y", "label"]);
    assert!(!run.ok(), "{}", run.all());
    assert!(
        run.all().contains("m.csv") && run.all().contains("line 3, column \"v\"") && run.all().contains("--fill"),
        "{}",
        run.all()
    );
    let run = import(&dir, &["m.csv", "m.h5", "--y", "label", "--fill", "0"]);
    assert!(run.ok(), "{}", run.all());

    std::fs::write(dir.join("t.csv"), "u,v,label\n1,abc,0\n").unwrap();
    let run = import(&dir, &["t.csv", "t.h5", "--y", "label"]);
    assert!(
        !run.ok() && run.all().contains("line 2, column \"v\"") && run.all().contains("not a number"),
        "{}",
        run.all()
    );

    let mut rows = String::from("u,label\n");
    for i in 0..1100 {
        rows += &format!("{i},{}\n", i % 2);
    }
    rows += "7,cat\n";
    std::fs::write(dir.join("l.csv"), rows).unwrap();
    let run = import(&dir, &["l.csv", "l.h5", "--y", "label"]);
    assert!(
        !run.ok() && run.all().contains("line 1102") && run.all().contains("not an integer class label"),
        "{}",
        run.all()
    );

    let run = import(&dir, &["m.csv", "m.h5"]);
    assert!(!run.ok() && run.all().contains("--y") && run.all().contains("[\"u\", \"v\", \"label\"]"), "{}", run.all());
}

/// The test venv's python (pyarrow and pandas for Parquet), or None with a skip note.
/// Parquet as pandas (pyarrow) writes it: every numeric width and sign, booleans, float16, a
/// string label in the middle, several row groups (70,000 rows: more than one chunk), snappy
/// and zstd, a categorical label, the index column pandas adds left out; nullable columns with
/// `--fill`; two float targets; `--shard`; and the columns it refuses.
#[test]
fn parquet_matches_pandas() {
    let Some(py) = venv_python() else { return };
    let dir = scratch("import-parquet");
    venv(
        &py,
        &dir,
        r#"
import numpy as np, pandas as pd
rng = np.random.default_rng(7)
n = 70000
df = pd.DataFrame({
    "a": rng.normal(size=n).astype(np.float32), "b": rng.integers(-5, 1 << 40, n),
    "i8": rng.integers(-100, 100, n).astype(np.int8), "u32": rng.integers(0, 2**32 - 1, n, dtype=np.uint32),
    "u64": rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2),
})
df["kind"] = np.array(["gamma", "alpha", "beta, with comma"])[rng.integers(0, 3, n)]
df["flag"] = rng.random(n) > 0.5
df["h"] = rng.normal(size=n).astype(np.float16)
df["d"] = rng.random(n)
df.index = rng.permutation(n)          # not a RangeIndex: pandas writes it as a column
df.to_parquet("t.parquet", row_group_size=20000)
c = df.copy(); c["kind"] = c["kind"].astype("category")
c.to_parquet("cat.parquet", compression="zstd")
r = pd.DataFrame({"t1": rng.normal(size=500), "x1": rng.normal(size=500), "t2": rng.normal(size=500).astype(np.float32)})
r["x2"] = pd.array(rng.integers(0, 9, 500), dtype="Int64")
r.loc[[3, 77], "x2"] = pd.NA
r.loc[[5], "x1"] = np.nan
r.to_parquet("r.parquet", compression="gzip", row_group_size=128)
import pyarrow as pa, pyarrow.parquet as pq
assert "__index_level_0__" in pq.read_metadata("t.parquet").schema.names
pq.write_table(pa.table({"v": [1.0, 2.0], "when": pa.array([0, 1], pa.timestamp("s")), "y": [0, 1]}), "date.parquet")
pq.write_table(pa.table({"v": [[1.0], [2.0]], "y": [0, 1]}), "list.parquet")
pq.write_table(pa.table({"v": [1.0, 2.0], "y": pa.array([0, None], pa.int64())}), "noy.parquet")
"#,
    );
    let check = |h5: &str, src: &str| {
        venv(
            &py,
            &dir,
            &format!(
                r#"
import numpy as np, pandas as pd, h5py
df = pd.read_parquet("{src}")
cat = pd.Categorical(df["kind"].astype(str))  # names sorted, as LabelEncoder numbers them
codes, names = cat.codes, cat.categories
f = h5py.File("{h5}")
x = df.drop(columns=["kind"]).to_numpy(np.float32)
assert f["x"].dtype == np.float32 and f["y"].dtype == np.int32
assert np.array_equal(f["x"][...], x), "x differs from pandas"
assert np.array_equal(f["y"][...], codes), "y differs from pandas.Categorical's codes"
assert [s.decode() for s in f["y_classes"][...]] == list(names), "class names"
assert [s.decode() for s in f["x_columns"][...]] == ["a", "b", "i8", "u32", "u64", "flag", "h", "d"]
print("ok")
"#
            ),
        )
    };
    for src in ["t.parquet", "cat.parquet"] {
        let run = import(&dir, &[src, "t.h5", "--y", "kind"]);
        assert!(run.ok(), "{src}: {}", run.all());
        assert!(run.stderr.contains("wrote x float32 [70000, 8], y int32 [N] classes"), "{}", run.all());
        assert_eq!(check("t.h5", src).trim(), "ok", "{src}");
    }

    // Nulls: an error naming the row and column, or filled as pandas' fillna fills them.
    let run = import(&dir, &["r.parquet", "r.h5", "--y", "t1", "--y", "t2"]);
    assert!(!run.ok() && run.all().contains("row 3, column \"x2\"") && run.all().contains("--fill"), "{}", run.all());
    let run = import(&dir, &["r.parquet", "r.h5", "--y", "t1", "--y", "t2", "--fill", "-1", "--shard", "3"]);
    assert!(run.ok(), "{}", run.all());
    let out = venv(
        &py,
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
df = pd.read_parquet("r.parquet")
fs = [h5py.File(f"r-{i}.h5") for i in range(3)]
assert [f["x"].shape[0] for f in fs] == [166, 167, 167], [f["x"].shape for f in fs]
x = np.concatenate([f["x"][...] for f in fs]); y = np.concatenate([f["y"][...] for f in fs])
assert np.array_equal(x, df[["x1", "x2"]].astype("float64").fillna(-1).to_numpy(np.float32)), "x"
assert np.array_equal(y, df[["t1", "t2"]].to_numpy(np.float32)), "y"
print("ok")
"#,
    );
    assert_eq!(out.trim(), "ok");

    // Refused up front, naming the file and column, or the row of a missing target.
    for (file, args, says) in [
        ("t.parquet", vec!["--y", "b"], "column \"kind\""),
        ("date.parquet", vec!["--y", "y"], "column \"when\""),
        ("list.parquet", vec!["--y", "y"], "nested or list column"),
        ("noy.parquet", vec!["--y", "y"], "row 1, column \"y\": missing target"),
        ("t.parquet", vec!["--y", "nope"], "[\"a\", \"b\", \"i8\", \"u32\", \"u64\", \"kind\""),
    ] {
        let mut a = vec![file, "bad.h5"];
        a.extend(args);
        let run = import(&dir, &a);
        assert!(!run.ok() && run.all().contains(says) && run.all().contains(file), "{file}: {}", run.all());
    }
}

#[test]
fn sample_weights_come_from_every_format() {
    let _g = mpi_lock();
    let dir = scratch("import-weights");
    python(
        &dir,
        r#"
import numpy as np, pandas as pd
rng = np.random.default_rng(11)
n = 301
df = pd.DataFrame({"a": rng.normal(size=n), "wt": rng.random(n) * 3, "b": rng.normal(size=n)})
df["label"] = rng.integers(0, 3, n)
df.loc[7, "wt"] = 0.0
df.to_csv("t.csv", index=False, float_format="%.9g")
np.savez("z.npz", x=rng.random((40, 3), dtype=np.float32), y=rng.integers(0, 2, 40), w=rng.integers(0, 4, 40))
np.save("x.npy", rng.normal(size=(40, 2))); np.save("y.npy", rng.normal(size=40)); np.save("w.npy", rng.random((40, 1)))
np.save("w39.npy", rng.random(39))
"#,
    );
    let run = import(&dir, &["t.csv", "t-{rank}.h5", "--y", "label", "--sample-weight", "wt", "--shard", "2"]);
    assert!(run.ok(), "{}", run.all());
    assert!(
        run.stderr.contains("w float32 [301] sample weights") && run.stderr.contains("sample_weight = \"w\""),
        "{}",
        run.all()
    );
    let check = python(
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
df = pd.read_csv("t.csv")
fs = [h5py.File(f"t-{i}.h5") for i in range(2)]
assert [f["w"].shape for f in fs] == [(150,), (151,)], [f["w"].shape for f in fs]
assert np.array_equal(np.concatenate([f["w"][...] for f in fs]), df["wt"].to_numpy(np.float32)), "w"
assert np.array_equal(np.concatenate([f["x"][...] for f in fs]), df[["a", "b"]].to_numpy(np.float32)), "x"
assert [s.decode() for s in fs[0]["x_columns"][...]] == ["a", "b"]
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");
    // The files train with the key the import's log line gives.
    job(&dir, &[2, 6, 3], "t-{rank}.h5", None, "");
    let text =
        std::fs::read_to_string(dir.join("job.toml")).unwrap().replace("[data]\n", "[data]\nsample_weight = \"w\"\n");
    std::fs::write(dir.join("job.toml"), text).unwrap();
    let run = mpirun(2, &["train", "job.toml"], &dir, 60);
    assert!(run.ok() && run.stderr.contains("sample weights: dataset w, 301 training rows"), "{}", run.all());
    assert!(run.stderr.contains("1 rows weigh 0"), "{}", run.all());

    let run = import(&dir, &["z.npz", "z.h5", "--sample-weight", "w"]);
    assert!(run.ok(), "{}", run.all());
    let run = import(&dir, &["x.npy", "n.h5", "--y-file", "y.npy", "--sample-weight", "w.npy"]);
    assert!(run.ok(), "{}", run.all());
    let check = python(
        &dir,
        r#"
import numpy as np, h5py
z, f = np.load("z.npz"), h5py.File("z.h5")
assert np.array_equal(f["w"][...], z["w"].astype(np.float32)) and f["w"].dtype == np.float32
g = h5py.File("n.h5")
assert np.array_equal(g["w"][...], np.load("w.npy")[:, 0].astype(np.float32))
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");

    // Refused, naming the file, the line (row) and the column.
    std::fs::write(dir.join("neg.csv"), "u,w,label\n1,1,0\n3,-2,1\n").unwrap();
    std::fs::write(dir.join("gap.csv"), "u,w,label\n1,1,0\n3,,1\n").unwrap();
    std::fs::write(dir.join("txt.csv"), "u,w,label\n1,1,0\n3,heavy,1\n").unwrap();
    for (file, args, says) in [
        ("neg.csv", vec!["--sample-weight", "w"], "line 3, column \"w\": sample weight -2 is negative"),
        ("gap.csv", vec!["--sample-weight", "w"], "line 3, column \"w\": missing sample weight"),
        ("txt.csv", vec!["--sample-weight", "w"], "line 3, column \"w\": \"heavy\" is not a number"),
        ("neg.csv", vec!["--sample-weight", "label"], "which --y names as a target"),
        ("neg.csv", vec!["--sample-weight", "weight"], "no column \"weight\""),
        ("z.npz", vec!["--sample-weight", "v"], "no array \"v\""),
        ("x.npy", vec!["--y-file", "y.npy", "--sample-weight", "w39.npy"], "one weight per row"),
    ] {
        let mut a = vec![file, "bad.h5"];
        if file.ends_with(".csv") {
            a.extend(["--y", "label"]);
        }
        a.extend(args);
        let run = import(&dir, &a);
        assert!(!run.ok() && run.all().contains(says), "{file}: {}", run.all());
    }

    // Parquet, with the test venv's pyarrow.
    let Some(py) = venv_python() else { return };
    venv(
        &py,
        &dir,
        r#"
import numpy as np, pandas as pd
rng = np.random.default_rng(3)
df = pd.DataFrame({"a": rng.normal(size=50), "w": rng.integers(0, 5, 50).astype(np.int16), "y": rng.integers(0, 2, 50)})
df.to_parquet("t.parquet")
df["w"] = df["w"].astype("float64"); df.loc[4, "w"] = np.nan
df.to_parquet("nan.parquet")
"#,
    );
    let run = import(&dir, &["t.parquet", "p.h5", "--y", "y", "--sample-weight", "w"]);
    assert!(run.ok(), "{}", run.all());
    let out = venv(
        &py,
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
df, f = pd.read_parquet("t.parquet"), h5py.File("p.h5")
assert np.array_equal(f["w"][...], df["w"].to_numpy(np.float32)) and np.array_equal(f["x"][...][:, 0], df["a"].to_numpy(np.float32))
print("ok")
"#,
    );
    assert_eq!(out.trim(), "ok");
    let run = import(&dir, &["nan.parquet", "p.h5", "--y", "y", "--sample-weight", "w"]);
    assert!(!run.ok() && run.all().contains("row 4, column \"w\": missing sample weight"), "{}", run.all());
}
