//! `model.init` (Keras' `kernel_initializer`) under a real `mpirun`: the start-up log names a
//! chosen initializer, the weights then start (and end) elsewhere than under the default
//! glorot_uniform, the same seed gives the same weights, and an unknown name is an error that
//! lists the known ones. The draws themselves are checked in `model::tests`.

use crate::common;
use common::*;

#[test]
fn a_chosen_init_is_logged_and_used_and_an_unknown_one_refused() {
    let _g = common::mpi_lock();
    let dir = scratch("init");
    let (x, y) = synthetic(64, 6, 3, 2);
    write_classes(&dir.join("d.h5"), &x, 6, &y);
    job(&dir, &[6, 16, 3], "d.h5", None, "");
    let (plain, log) = train_weights(&dir, "plain", 2, 2, &[], &[], &[]);
    assert!(!log.contains(", init "), "the default is not named: {log}");
    let (lecun, log) = train_weights(&dir, "lecun", 2, 2, &[], &[], &["model.init=\"lecun_normal\""]);
    assert!(log.contains("activation relu, loss softmax_cross_entropy, init lecun_normal ("), "{log}");
    assert!(max_diff(&plain, &lecun) > 1e-3, "lecun_normal changed nothing");
    let (again, _) = train_weights(&dir, "again", 2, 2, &[], &[], &["model.init=\"lecun_normal\""]);
    assert_eq!(again, lecun, "the same seed and init must give the same weights");
    let r = mpirun(2, &["train", "job.toml", "--set", "model.init=\"kaiming\""], &dir, 60);
    assert!(!r.ok(), "{}", r.all());
    assert!(r.stderr.contains("`model.init`") && r.stderr.contains("he_normal"), "{}", r.all());
}
