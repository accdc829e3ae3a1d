import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")
sys.path.insert(0, os.path.dirname(__file__))
