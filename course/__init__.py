"""The course, no Streamlit: what the lessons and labs hold and ask (registry, predictions, claims,
quizzes), and the worked examples, numbers and pictures they show. The pages read it."""
