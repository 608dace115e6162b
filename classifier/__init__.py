"""Request-content classifier: code / prose / structured.

    from classifier import Classifier
    clf = Classifier.load()                     # the shipped model (classifier/model/)
    clf.predict(system_text, user_text, history_text="", response_format=None).label

numpy only at inference (scikit-learn is needed to train, not to predict).
"""

from classifier.model import Classifier, Prediction
from classifier.request_text import LABELS

__all__ = ["LABELS", "Classifier", "Prediction"]
