//! Column names from the table to the prediction (`data::columns`, `eval/predict.rs`):
//!
//! - weights.h5 records the training data's `x_columns` (and a regression's `y_columns`);
//! - `hvtrain predict --input new.csv` reads a CSV whose columns come in another order, with
//!   an id and the label among them, by name: its probabilities (parsed from the CSV output)
//!   equal those `predict` writes for an HDF5 file holding the model's columns in order,
//!   each row's class is named, and `--output .csv` has a header; a `.h5` made with `data
//!   import --features-only --drop` (its columns in another order too) gives the same; a
//!   column the model needs is missing: an error naming it, no output left behind; `--keep id
//!   --keep label` copies those columns, as they stand, before the predictions;
//! - regression: the CSV's columns are the targets' names, the values `predict`'s outputs;
//!   the ONNX export's metadata has `x_columns` and `y_columns`;
//! - a test file whose columns are in another order is refused by training (both files
//!   named), and imported with `--columns-from train.h5` it trains;
//! - `--one-hot`: a string and an integer-code column become `COLUMN=VALUE` features in place,
//!   equal to pandas' `get_dummies` (CSV and Parquet alike); `--columns-from` encodes the same;
//!   `predict` on a CSV with shuffled columns and a value training never saw gives the outputs of
//!   the rows encoded by hand (that value all 0) and logs it.

use crate::common;
use common::*;

fn ok(run: Run) -> Run {
    assert!(run.ok(), "{}", run.all());
    run
}

#[test]
fn predict_reads_a_table_by_column_name() {
    let _g = mpi_lock();
    let dir = scratch("columns-predict");
    python(
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
rng = np.random.default_rng(11)
n = 400
df = pd.DataFrame({"id": [f"r{i}" for i in range(n)], "a": rng.normal(size=n), "b": rng.normal(size=n),
                   "c": rng.normal(size=n)})
df["label"] = np.where(df.a + 0.5 * df.b > 0.2, "hi", np.where(df.c > 0, "mid", "lo"))
df["e"] = 2 * df.a - df.c
df["p"] = df.b * 3 + 1
df[["id", "a", "b", "c", "label"]].to_csv("train.csv", index=False)
df[["a", "b", "c", "e", "p"]].to_csv("reg.csv", index=False)
new = df.iloc[:50]
new[["c", "label", "a", "id", "b"]].to_csv("new.csv", index=False)
new[["c", "a"]].to_csv("short.csv", index=False)
with h5py.File("ordered.h5", "w") as f:  # the model's columns in order, no names
    f["x"] = new[["a", "b", "c"]].to_numpy(np.float32)
new[["c", "label", "b", "a"]].to_csv("test.csv", index=False)
new[["a", "b", "c"]].to_csv("bare.csv", index=False, header=False, sep=";")  # no names: by position
"#,
    );
    ok(hvtrain(&["data", "import", "train.csv", "train.h5", "--y", "label", "--drop", "id"], &dir, 60));
    job(&dir, &[3, 8, 3], "train.h5", None, "[optimizer]\nkind = \"adam\"\nlr = 0.01\n");
    ok(mpirun(1, &["train", "job.toml", "--set", "training.epochs=3"], &dir, 60));
    let predict = |input: &str, output: &str| {
        hvtrain(&["predict", "job.toml", "--weights", "out/weights.h5", "--input", input, "--output", output], &dir, 60)
    };
    let run = ok(predict("new.csv", "p.csv"));
    assert!(run.stderr.contains("the model's columns [\"a\", \"b\", \"c\"] by name"), "{}", run.all());
    ok(predict("ordered.h5", "p.h5"));
    ok(hvtrain(
        &["data", "import", "new.csv", "new.h5", "--features-only", "--drop", "label", "--drop", "id"],
        &dir,
        60,
    ));
    let run = ok(predict("new.h5", "q.csv"));
    assert!(run.stderr.contains("matched to the model's 3 by name"), "{}", run.all());
    let check = python(
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
w = h5py.File("out/weights.h5")
assert list(w.attrs["x_columns"]) == ["a", "b", "c"], w.attrs["x_columns"]
p, q, h = pd.read_csv("p.csv"), pd.read_csv("q.csv"), h5py.File("p.h5")
assert list(p.columns) == ["class", "p_hi", "p_lo", "p_mid"], list(p.columns)
probs = p[["p_hi", "p_lo", "p_mid"]].to_numpy(np.float32)
assert np.array_equal(probs, h["probabilities"][...]), np.abs(probs - h["probabilities"][...]).max()
assert list(p["class"]) == [s.decode() for s in h["class_names"][...]]
assert p.equals(q), "the HDF5 input with names gives what the CSV gives"
print("ok", (p["class"] == pd.read_csv("new.csv")["label"]).mean())
"#,
    );
    assert!(check.starts_with("ok"), "{check}");
    // --keep copies input columns, as they stand, before the predictions.
    let keep = ["--keep", "id", "--keep", "label"];
    let args = ["predict", "job.toml", "--weights", "out/weights.h5", "--input", "new.csv", "--output", "k.csv"];
    ok(hvtrain(&[&args[..], &keep[..]].concat(), &dir, 60));
    let check = python(
        &dir,
        r#"
import pandas as pd
k, p, new = pd.read_csv("k.csv"), pd.read_csv("p.csv"), pd.read_csv("new.csv")
assert list(k.columns) == ["id", "label", "class", "p_hi", "p_lo", "p_mid"], list(k.columns)
assert list(k["id"]) == list(new["id"]) and list(k["label"]) == list(new["label"])
assert k.drop(columns=["id", "label"]).equals(p)
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");
    // A CSV without a header (and another separator): the model's columns by position; --keep
    // by 0-based index.
    let bare = ["predict", "job.toml", "--weights", "out/weights.h5", "--input", "bare.csv", "--output", "b.csv"];
    let run = ok(hvtrain(&[&bare[..], &["--no-header", "--delimiter", ";", "--keep", "0"]].concat(), &dir, 60));
    assert!(run.stderr.contains("without a header (--no-header)"), "{}", run.all());
    let check = python(
        &dir,
        r#"
import pandas as pd
b, p, new = pd.read_csv("b.csv"), pd.read_csv("p.csv"), pd.read_csv("new.csv")
assert list(b.columns) == ["0", "class", "p_hi", "p_lo", "p_mid"], list(b.columns)
assert b.drop(columns=["0"]).equals(p) and (b["0"] == new["a"]).all()
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");
    let run = hvtrain(&[&bare[..], &["--delimiter", ";"]].concat(), &dir, 60);
    assert!(!run.ok() && run.stderr.contains("no column"), "its first line is not the names: {}", run.all());
    let h5 = ["predict", "job.toml", "--weights", "out/weights.h5", "--input", "ordered.h5", "--output", "n.h5"];
    let run = hvtrain(&[&h5[..], &["--no-header"]].concat(), &dir, 60);
    assert!(!run.ok() && run.stderr.contains("--no-header") && run.stderr.contains("CSV/TSV"), "{}", run.all());
    let args = ["predict", "job.toml", "--weights", "out/weights.h5", "--input", "ordered.h5", "--output", "k.h5"];
    let run = hvtrain(&[&args[..], &keep[..]].concat(), &dir, 60);
    assert!(!run.ok() && run.stderr.contains("--keep"), "{}", run.all());
    // A column the model needs is missing: named, and nothing written.
    let run = predict("short.csv", "s.csv");
    assert!(!run.ok(), "{}", run.all());
    assert!(run.stderr.contains("short.csv") && run.stderr.contains("no column \"b\""), "{}", run.all());
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("s.csv") || n.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    // A test file with the columns in another order: refused, both files named; imported
    // with the training file's columns, it trains.
    ok(hvtrain(&["data", "import", "test.csv", "test.h5", "--y", "label", "--classes-from", "train.h5"], &dir, 60));
    let run = mpirun(1, &["train", "job.toml", "--set", "data.test=\"test.h5\""], &dir, 60);
    assert!(!run.ok(), "{}", run.all());
    assert!(
        run.stderr.contains("test.h5: x_columns")
            && run.stderr.contains("differently from train.h5")
            && run.stderr.contains("--columns-from train.h5"),
        "{}",
        run.all()
    );
    let args = ["data", "import", "test.csv", "t2.h5", "--y", "label", "--classes-from", "train.h5"];
    ok(hvtrain(&[&args[..], &["--columns-from", "train.h5"]].concat(), &dir, 60));
    ok(mpirun(1, &["train", "job.toml", "--set", "data.test=\"t2.h5\""], &dir, 60));

    // Regression: the table's columns are the targets' names.
    ok(hvtrain(&["data", "import", "reg.csv", "reg.h5", "--y", "e", "--y", "p"], &dir, 60));
    std::fs::write(
        dir.join("reg.toml"),
        "[data]\ntrain = \"reg.h5\"\nnormalize_y = \"standard\"\n[model]\nlayers = [3, 8, 2]\nloss = \"mse\"\n\
         [training]\nepochs = 2\nbatch_size = 16\n[output]\ndir = \"reg\"\n",
    )
    .unwrap();
    ok(mpirun(1, &["train", "reg.toml"], &dir, 60));
    let reg = |input: &str, output: &str| {
        ok(hvtrain(
            &["predict", "reg.toml", "--weights", "reg/weights.h5", "--input", input, "--output", output],
            &dir,
            60,
        ))
    };
    reg("new.csv", "r.csv");
    reg("ordered.h5", "r.h5");
    let check = python(
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
r = pd.read_csv("r.csv")
assert list(r.columns) == ["e", "p"], list(r.columns)
assert np.array_equal(r.to_numpy(np.float32), h5py.File("r.h5")["outputs"][...])
assert list(h5py.File("reg/weights.h5").attrs["y_columns"]) == ["e", "p"]
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");

    // The ONNX export carries the names as metadata (the venv has onnx).
    ok(hvtrain(&["export", "reg.toml", "--weights", "reg/weights.h5", "--output", "m.onnx"], &dir, 60));
    if let Some(py) = venv_python() {
        let meta = venv(
            &py,
            &dir,
            r#"
import json, onnx
m = {p.key: p.value for p in onnx.load("m.onnx").metadata_props}
print(json.loads(m["x_columns"]), json.loads(m["y_columns"]))
"#,
        );
        assert_eq!(meta.trim(), "['a', 'b', 'c'] ['e', 'p']", "ONNX metadata");
    }
}

#[test]
fn one_hot_columns_match_get_dummies_and_carry_to_predict() {
    let _g = mpi_lock();
    let dir = scratch("columns-one-hot");
    python(
        &dir,
        r#"
import numpy as np, pandas as pd, h5py
rng = np.random.default_rng(4)
n = 300
df = pd.DataFrame({"a": rng.normal(size=n).round(3), "color": rng.choice(["red", "green", "blue"], n),
                   "size": rng.choice([1, 2, 10], n), "b": rng.normal(size=n).round(3)})
df["label"] = ((df.color == "red") ^ (df["size"] == 10)).astype(int)
df.to_csv("train.csv", index=False)
def encode(d, cats):  # the features in place, one-hot columns as get_dummies orders their values
    parts = []
    for c in ["a", "color", "size", "b"]:
        if c in cats:
            parts.append(pd.get_dummies(pd.Categorical(d[c], categories=cats[c])).to_numpy(np.float32))
        else:
            parts.append(d[[c]].to_numpy(np.float32))
    return np.concatenate(parts, axis=1)
cats = {"color": ["blue", "green", "red"], "size": [1, 2, 10]}
np.save("want.npy", encode(df, cats))
new = df.iloc[:40].copy()
new.loc[new.index[3], "color"] = "purple"  # never seen in training: all 0
new[["b", "size", "label", "color", "a"]].to_csv("new.csv", index=False)
with h5py.File("new-encoded.h5", "w") as f:
    f["x"] = encode(new, cats)
"#,
    );
    let run = ok(hvtrain(
        &["data", "import", "train.csv", "train.h5", "--y", "label", "--one-hot", "color", "--one-hot", "size"],
        &dir,
        60,
    ));
    assert!(run.stderr.contains("wrote x float32 [300, 8]"), "{}", run.all());
    let check = python(
        &dir,
        r#"
import numpy as np, h5py
f = h5py.File("train.h5")
assert np.array_equal(f["x"][...], np.load("want.npy")), "x differs from get_dummies in place"
names = [s.decode() for s in f["x_columns"][...]]
assert names == ["a", "color=blue", "color=green", "color=red", "size=1", "size=2", "size=10", "b"], names
print("ok")
"#,
    );
    assert_eq!(check.trim(), "ok");
    // A file imported with the training file's columns encodes the same way.
    ok(hvtrain(&["data", "import", "train.csv", "again.h5", "--y", "label", "--columns-from", "train.h5"], &dir, 60));
    assert_eq!(read_f32(&dir.join("again.h5"), "x"), read_f32(&dir.join("train.h5"), "x"));
    // Parquet: the same features from the same table.
    if let Some(py) = venv_python() {
        venv(&py, &dir, "import pandas as pd; pd.read_csv('train.csv').to_parquet('train.parquet')");
        let args =
            ["data", "import", "train.parquet", "pq.h5", "--y", "label", "--one-hot", "color", "--one-hot", "size"];
        ok(hvtrain(&args, &dir, 60));
        assert_eq!(read_f32(&dir.join("pq.h5"), "x"), read_f32(&dir.join("train.h5"), "x"));
    }
    // Training, then predict on a CSV of shuffled columns with a colour never seen: the same
    // outputs as the rows encoded by hand (that colour all 0), and the unseen value logged.
    job(&dir, &[8, 8, 2], "train.h5", None, "[optimizer]\nkind = \"adam\"\nlr = 0.01\n");
    ok(mpirun(1, &["train", "job.toml", "--set", "training.epochs=2"], &dir, 60));
    let predict = |input: &str, output: &str| {
        ok(hvtrain(
            &["predict", "job.toml", "--weights", "out/weights.h5", "--input", input, "--output", output],
            &dir,
            60,
        ))
    };
    let run = predict("new.csv", "p.h5");
    assert!(
        run.stderr.contains("one-hot column \"color\": 1 row(s) hold a value none of its 3 features names (\"purple\""),
        "{}",
        run.all()
    );
    predict("new-encoded.h5", "q.h5");
    let (p, q) = (read_f32(&dir.join("p.h5"), "outputs"), read_f32(&dir.join("q.h5"), "outputs"));
    assert_eq!(p.len(), 80);
    assert_eq!(p, q, "predict's one-hot encoding differs from get_dummies'");
}
