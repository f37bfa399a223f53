"""Live web search QA (``memrl/WebSearchQA-v0``): headless Chromium behind the doc-QA interface.

Modules: ``env`` (the gymnasium env), ``client`` (search + page reading with cache, politeness and
retries), ``browser`` (the Chromium pool), ``proxy`` and ``policy`` (URL safety), ``backends``
(search engines and APIs), ``extract`` (readable text), ``cache``, ``tasks``, ``testsite`` (a local
site for tests and benchmarks). Selenium is imported only when a browser starts.
"""

from memrl.envs.web_search.env import WebSearchQAEnv
from memrl.envs.web_search.web_client import WebClient

__all__ = ["WebClient", "WebSearchQAEnv"]
