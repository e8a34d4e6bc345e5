"""Few-shot evaluation: feature extraction, CL2N, vectorised episodes, batched classifiers (seed 000 Sec. 2.3, 3.1).

Typical use::

    feats = extract_features(method.features, split.images, transform)          # once per checkpoint
    mean = extract_features(method.features, train.images, transform).mean(0)   # CL2N centre
    results = evaluate(feats, split.labels, shots=(1, 5), classifier=["nearest_centroid", "knn"],
                       train_mean=mean)
    json_ready = results_as_dict(results)

More classifiers join the registry with :func:`register_classifier` (see :mod:`.classifiers`).
"""

from studylib.evaluation.classifiers import (CLASSIFIERS, Classifier, get_classifier, knn, nearest_centroid,
                                             pairwise_sq_dists, register_classifier, soft_assignment)
from studylib.evaluation.episodes import Episodes, episode_seed, sample_episodes
from studylib.evaluation.evaluate import (EvalResult, cl2n, default_chunk, evaluate, extract_features,
                                          pool_results, results_as_dict)

__all__ = [
    "CLASSIFIERS", "Classifier", "EvalResult", "Episodes", "cl2n", "default_chunk", "evaluate", "extract_features",
    "get_classifier", "knn", "nearest_centroid", "pairwise_sq_dists", "pool_results", "register_classifier",
    "results_as_dict", "episode_seed", "sample_episodes", "soft_assignment",
]
