"""Chat templates rendered as Hugging Face's apply_chat_template renders
them (a sandboxed Jinja environment with trim_blocks and lstrip_blocks,
raise_exception, bos_token and eos_token): the reference for gcore-run
--chat and gcore-serve's chat endpoint. The templates are the models' own
(their tokenizer_config.json), copied as text."""
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

# meta-llama/Llama-2-7b-chat-hf
LLAMA2 = ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
          "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
          "{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) "
          "%}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
          "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
          "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}"
          "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
          "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
# mistralai/Mistral-7B-Instruct-v0.1
MISTRAL = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
           "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
           "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
           "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only "
           "user and assistant roles are supported!') }}{% endif %}{% endfor %}")
# meta-llama/Meta-Llama-3-8B-Instruct
LLAMA3 = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
          "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
          "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
          "{% endif %}")
# teknium/OpenHermes-2.5-Mistral-7B (ChatML)
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# TinyLlama/TinyLlama-1.1B-Chat-v1.0 (Zephyr's)
ZEPHYR = ("{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + "
          "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
          "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n"
          "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")

# deepseek-ai/DeepSeek-R1-Distill-Llama-8B (DeepSeek R1's, with tool calls)
DEEPSEEK_R1 = ("{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
               "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
               "{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = "
               "message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in "
               "messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + "
               "message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none "
               "%}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}"
               "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
               "tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + "
               "'```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\\n' + "
               "'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + "
               "'```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
               "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if "
               "message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}"
               "{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false "
               "-%}{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = "
               "content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}"
               "{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if "
               "ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + "
               "'<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'\\n<｜tool▁output▁begin｜>' "
               "+ message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool "
               "%}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}"
               "{{'<｜Assistant｜><think>\\n'}}{% endif %}")
# the same with the generation prompt of R1's first release (and V3's):
# the reply's <think> left to the model
DEEPSEEK = DEEPSEEK_R1.replace("{{'<｜Assistant｜><think>\\n'}}", "{{'<｜Assistant｜>'}}")

TEMPLATES = {"llama2": LLAMA2, "mistral": MISTRAL, "llama3": LLAMA3, "chatml": CHATML, "zephyr": ZEPHYR,
             "deepseek": DEEPSEEK, "deepseek_r1": DEEPSEEK_R1}
# the control tokens each needs in a vocabulary
_DS = ["<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"]
CONTROLS = {"llama2": [], "mistral": [], "llama3": ["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
            "chatml": ["<|im_start|>", "<|im_end|>"], "zephyr": [], "deepseek": _DS, "deepseek_r1": _DS}
# and the user-defined (added, not special) ones: DeepSeek R1's distills'
USER_TOKENS = {"deepseek_r1": ["<think>", "</think>"]}


def _raise(message):
    raise TemplateError(message)


def render(template, messages, bos="<s>", eos="</s>", add_generation_prompt=True):
    """The text of messages through template; TemplateError where the
    template refuses them (raise_exception)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise
    return env.from_string(template).render(messages=messages, bos_token=bos, eos_token=eos,
                                            add_generation_prompt=add_generation_prompt)
