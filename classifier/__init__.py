"""Request-content classifier: code / prose / structured.

    from classifier import Classifier
    clf = Classifier.load()                     # the shipped model (classifier/model/)
    clf.predict(RequestText(system="...", user="...")).label   # contracts.request_text.RequestText

numpy only at inference (scikit-learn is needed to train, not to predict).
"""

from classifier.model import Classifier, Prediction
from contracts.names import CLASSES as LABELS

__all__ = ["LABELS", "Classifier", "Prediction"]
